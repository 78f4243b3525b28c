package netem_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport/inproc"
	"github.com/m2n-dev/m2n/transport/netem"
)

// Two in-process ranks in two domains, their traffic delayed as by NICs of
// 1 GB/s: a rank's transports share its NIC, as a rank's pipeline stages
// share its one network interface. A rate that is not a network is an
// error naming the value.
func ExampleWrap() {
	world := inproc.NewWorld(2)
	topo := reshard.Topology{Domain: []int{0, 1}}
	for r := 0; r < 2; r++ {
		nic, err := netem.NewNIC(1e9)
		if err != nil {
			panic(err)
		}
		t := netem.Wrap(world.Transport(r), topo, nic)
		fmt.Println("rank", t.Rank(), "of", t.Size(), "at", nic.Rate(), "bytes/s")
	}
	_, err := netem.NewNIC(1e-300)
	fmt.Println(err)
	// Output:
	// rank 0 of 2 at 1e+09 bytes/s
	// rank 1 of 2 at 1e+09 bytes/s
	// emulated network rate 1e-300 bytes/s, want a finite rate of at least 1 byte/s: slower rates make delays no clock can hold
}
