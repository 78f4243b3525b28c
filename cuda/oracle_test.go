package cuda

import (
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// The kernels' oracles on the CPU: transport.HostMemory packs, unpacks and
// copies the regions a descriptor describes in host buffers, run by run.

func hostPack(dst, src []byte, d strided.Desc) error {
	return transport.HostMemory{}.Pack(transport.HostBuffer(dst), 0, transport.HostBuffer(src), d)
}

func hostUnpack(dst []byte, d strided.Desc, src []byte) error {
	return transport.HostMemory{}.Unpack(transport.HostBuffer(dst), d, transport.HostBuffer(src), 0)
}

func hostCopy(dst []byte, dstDesc strided.Desc, src []byte, srcDesc strided.Desc) error {
	return transport.HostMemory{}.Copy(transport.HostBuffer(dst), dstDesc, transport.HostBuffer(src), srcDesc)
}
