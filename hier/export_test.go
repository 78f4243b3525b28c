package hier

// BlockOwner exposes blockOwner to the tests.
var BlockOwner = blockOwner
