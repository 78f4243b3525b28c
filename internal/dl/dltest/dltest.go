// Package dltest holds symbol tables over the C math library (libm.so.6,
// present wherever glibc is) for the tests of package internal/dl, which
// cannot declare C in test files.
package dltest

/*
#include <stddef.h>

#include "../dl.h"

static struct {
	double (*cos)(double);
	double (*sin)(double);
	double (*absent)(double);
} fn;

// Good: a plain name, a second name after an absent first, an optional
// absent symbol.
static m2n_dl_sym good[] = {
	{ (void **)&fn.cos, { "cos", NULL }, 0 },
	{ (void **)&fn.sin, { "m2n_dltest_no_sin", "sin" }, 0 },
	{ (void **)&fn.absent, { "m2n_dltest_optional", NULL }, 1 },
};
static m2n_dl_table good_table = M2N_DL_TABLE(good);

static struct {
	double (*cos)(double);
	double (*a)(double);
	double (*b)(double);
} bad_fn;

// Bad: two required symbols libm does not have.
static m2n_dl_sym bad[] = {
	{ (void **)&bad_fn.cos, { "cos", NULL }, 0 },
	{ (void **)&bad_fn.a, { "m2n_dltest_missing_a", NULL }, 0 },
	{ (void **)&bad_fn.b, { "m2n_dltest_missing_b", NULL }, 0 },
};
static m2n_dl_table bad_table = M2N_DL_TABLE(bad);

// Rows with a field of the binding's own after the m2n_dl_sym.
static struct {
	double (*floor)(double);
	double (*ceil)(double);
} ext_fn;
static struct ext_row {
	m2n_dl_sym sym;
	int version;
	const char *note;
} ext[] = {
	{ { (void **)&ext_fn.floor, { "floor", NULL }, 0 }, 1, "floor" },
	{ { (void **)&ext_fn.ceil, { "ceil", NULL }, 0 }, 2, "ceil" },
};
static m2n_dl_table ext_table = M2N_DL_TABLE(ext);

static void *good_t(void) { return &good_table; }
static void *bad_t(void) { return &bad_table; }
static void *ext_t(void) { return &ext_table; }

// Go cannot name static C variables: these read the slots.
enum { COS, SIN, ABSENT, BAD_COS, FLOOR, CEIL };
static double (*slot(int which))(double) {
	switch (which) {
	case COS: return fn.cos;
	case SIN: return fn.sin;
	case ABSENT: return fn.absent;
	case BAD_COS: return bad_fn.cos;
	case FLOOR: return ext_fn.floor;
	case CEIL: return ext_fn.ceil;
	}
	return NULL;
}
static int filled(int which) { return slot(which) != NULL; }
static double call(int which, double x) { return slot(which)(x); }
*/
import "C"

import "unsafe"

// Good is a table of cos, sin (by its second name) and an optional symbol
// libm lacks.
func Good() unsafe.Pointer { return C.good_t() }

// Bad is a table of cos and two required symbols libm lacks.
func Bad() unsafe.Pointer { return C.bad_t() }

// Ext is a table of floor and ceil in rows that carry fields after their
// m2n_dl_sym.
func Ext() unsafe.Pointer { return C.ext_t() }

func call(which C.int, x float64) (float64, bool) {
	if C.filled(which) == 0 {
		return 0, false
	}
	return float64(C.call(which, C.double(x))), true
}

// Cos calls cos through Good's slot; ok is false if the slot is empty.
func Cos(x float64) (y float64, ok bool) { return call(C.COS, x) }

// Sin calls sin through Good's slot; ok is false if the slot is empty.
func Sin(x float64) (y float64, ok bool) { return call(C.SIN, x) }

// OptionalSet reports whether Good's optional slot was filled.
func OptionalSet() bool { return C.filled(C.ABSENT) != 0 }

// BadCosSet reports whether Bad's cos slot is filled.
func BadCosSet() bool { return C.filled(C.BAD_COS) != 0 }

// Floor calls floor through Ext's slot; ok is false if the slot is empty.
func Floor(x float64) (y float64, ok bool) { return call(C.FLOOR, x) }

// Ceil calls ceil through Ext's slot; ok is false if the slot is empty.
func Ceil(x float64) (y float64, ok bool) { return call(C.CEIL, x) }
