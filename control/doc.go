// Package control is the control plane every step of m2n runs: the
// bounded collectives of a group of ranks, the agreement on what they were
// given, and the typed errors that cross ranks.
//
// A Group (package session implements it over MPI; Plain makes one from a
// bare Collective) is the ranks' Collective, the channel on which a rank
// that gives up tells the others (Watch, Fail) and whether it can run
// more. Agree makes the ranks agree on named Fields and on every rank's
// readiness in one small collective: a field that differs is an
// *AgreementError, a rank's local failure a *ValidationError that every
// rank returns, typed. Exchange gathers every rank's blob; WithPhase names
// what a collective is for, so that a *TimeoutError can say. One rank's
// own failure aborts the group and every peer returns an *AbortError
// naming it; a rank that leaves is named at once (*LeftError). Errors
// keep their types across ranks (EncodeError, DecodeError; RegisterError
// adds the types of the packages above, such as package refit's).
package control
