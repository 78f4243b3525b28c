/* check.h: what the C ABI's test programs (smoke.c, link.c) share. The
 * including file defines PROG (its name in messages) and the ints rank and
 * failures before it includes this. CHECK counts a failed condition and
 * prints "PROG: rank R: message"; last returns the library's last error
 * message on this thread (m2n_last_error). */
#define CHECK(cond, ...)                                          \
	do {                                                      \
		if (!(cond)) {                                    \
			fprintf(stderr, "%s: rank %d: ", PROG, rank); \
			fprintf(stderr, __VA_ARGS__);             \
			fprintf(stderr, "\n");                    \
			failures++;                               \
		}                                                 \
	} while (0)

static const char *last(void) {
	static char buf[4096];
	m2n_last_error(buf, sizeof buf);
	return buf;
}
