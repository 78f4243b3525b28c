// Package refit is m2n's step runtime: the one owner of a prepared call
// and of each step it runs, whatever moves the bytes.
//
// A Runtime serves one control.Group of ranks (package session implements
// it over MPI; control.Plain makes one from a bare control.Collective),
// whose control plane (package control) bounds every collective and
// carries the agreement and the typed errors. Runtime.Prepare validates
// every rank's Specs, plans (package reshard), schedules on a route,
// compiles this rank's part (package reshard/program), picks the Driver
// for the Target (the host driver here; the GPU replay and graph drivers
// of package refit/gpu) and makes every rank agree on what it was given
// and on the schedule it built. The Call it returns runs every step the
// same way:
//
//	begin  one collective: every rank's buffer check, the call's number
//	       and the step's; ranks that began different calls or steps all
//	       fail naming both (*CallMismatchError), a rank's bad buffers
//	       fail every rank naming it (*control.ValidationError); FP8 scales are
//	       exchanged and, with Options.Atomic, shadows made
//	move   the Driver moves the step's bytes; every wire operation
//	       carries the call's identity as its tag (the call's number and
//	       the step's parity), so two calls' messages cannot be taken
//	       for each other
//	end    checksums (Options.Verify), scales written, the completion
//	       agreement, the atomic commit, and a Report
//
// Run does all three; Launch and Wait split them around the caller's own
// GPU work, through the same begin and end. Errors keep their types
// across ranks (the runtime registers its own with
// control.RegisterError): an error every rank agreed on comes back as it
// is and the group stays usable; one rank's own failure aborts the group
// and every peer returns a *control.AbortError naming it; a rank that
// leaves is named at once (*control.LeftError); every wait is bounded
// (*control.TimeoutError).
package refit
