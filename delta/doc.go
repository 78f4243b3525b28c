// Package delta is the codec of the sharded delta sync (issue 27): a
// source encodes, per message, only the elements of its region that
// changed since the version the destinations hold, and a destination
// applies the message in place.
package delta
