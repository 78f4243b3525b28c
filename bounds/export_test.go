package bounds

// ChooseAmong exposes choose to the tests.
var ChooseAmong = choose
