package bounds_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/bounds"
)

// The paper's single-layer experiment: a 7168 MB expert projection from 16
// trainer ranks to TP8 generators replicated rho = 8 times in one domain,
// 50 GB/s NICs and 900 GB/s NVLink. hier's bound is the sources'
// injection, 8 times below flat's.
func ExampleOf() {
	p, err := bounds.Uniform(7168e6, 16, 8, 8, 1, 0)
	if err != nil {
		panic(err)
	}
	for _, b := range bounds.Of(p, bounds.Fabric{NetBW: 50e9, LocalBW: 900e9}) {
		fmt.Printf("%-7s %6.2f ms  %s\n", b.Route, b.Seconds*1e3, b.Binding)
	}
	// Output:
	// flat     71.68 ms  source injection rho*B/(Ns*BN)
	// agbcast 143.36 ms  root injection B/BN
	// hier      8.96 ms  source injection B/(Ns*BN)
}

// Choose picks the route the bounds predict fastest, latency included:
// a small tensor goes flat.
func ExampleChoose() {
	small, _ := bounds.Uniform(64<<10, 4, 2, 2, 1, 0)
	c := bounds.Choose(small, bounds.Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: 20e-6})
	fmt.Println(c.Route)
	// Output:
	// flat
}
