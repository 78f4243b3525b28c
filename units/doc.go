// Package units reads and writes the quantities m2n's programs take and
// report: sizes in bytes (16MiB, 7168MB), rates in bytes per second
// (50GB/s) or bits per second (400Gbps, as NICs are sold), and times
// (5us, 1.5ms, or plain seconds). Every program that parses them uses this
// package, so that one spelling means one value everywhere.
//
// Prefixes are decimal (k, M, G, T: 10^3 ...) or binary (Ki, Mi, Gi, Ti:
// 2^10 ...), in either case; a bare K, M or G on a size is binary, as in
// "16M". In a rate, B is a byte and b a bit: 50GB/s and 400Gbps are the
// same 5e10 bytes per second, and 50Gbps is 6.25e9.
//
//	n, _ := units.ParseBytes("16MiB")     // 16777216
//	r, _ := units.ParseRate("400Gbps")    // 5e10 (bytes per second)
//	s, _ := units.ParseSeconds("5us")     // 5e-06
//	units.FormatBytes(n)                  // "16 MiB"
//	units.FormatRate(r)                   // "50 GB/s"
//	units.FormatSeconds(8.96e-3)          // "8.96 ms"
package units
