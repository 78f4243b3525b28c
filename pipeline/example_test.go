package pipeline_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/pipeline"
)

// The paper's Example B: two stages of two trainer ranks and one generator
// rank. Each stage's communicator holds its trainers, then the generator;
// meshes are local to it.
func ExampleContiguous() {
	l := pipeline.Contiguous(2, 2, 1)
	for s := 0; s < l.Stages(); s++ {
		fmt.Printf("stage %d: world ranks %v, source mesh ranks %v, destination mesh ranks %v\n",
			s, l.Members(s), l.SrcRanks(s), l.DstRanks(s))
	}
	fmt.Println("world rank 4 is local rank", l.LocalRank(1, 4), "of stage 1")
	// Output:
	// stage 0: world ranks [0 1 4], source mesh ranks [0 1], destination mesh ranks [2]
	// stage 1: world ranks [2 3 4], source mesh ranks [0 1], destination mesh ranks [2]
	// world rank 4 is local rank 2 of stage 1
}
