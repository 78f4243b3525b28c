package cuda

import (
	"fmt"

	"github.com/m2n-dev/m2n/strided"
)

// HostPack copies the bytes that d describes in src into dst, contiguously,
// on the CPU: the reference for Pack, and usable for host buffers. It returns
// an error (wrapping ErrBadStrided) if d is invalid or a buffer is too short.
func HostPack(dst, src []byte, d strided.Desc) error {
	if err := checkHost(d, len(src), "source"); err != nil {
		return err
	}
	if int64(len(dst)) < d.Bytes() {
		return fmt.Errorf("%w: destination has %d bytes, needs %d", ErrBadStrided, len(dst), d.Bytes())
	}
	k := int64(0)
	d.ForEachRun(func(off int64) {
		copy(dst[k:k+d.Run], src[off:off+d.Run])
		k += d.Run
	})
	return nil
}

// HostUnpack copies len = d.Bytes() contiguous bytes from src to the places in
// dst that d describes: the reference for Unpack. Bytes of dst outside d are
// left alone.
func HostUnpack(dst []byte, d strided.Desc, src []byte) error {
	if err := checkHost(d, len(dst), "destination"); err != nil {
		return err
	}
	if err := d.CheckDisjoint(); err != nil {
		return err
	}
	if int64(len(src)) < d.Bytes() {
		return fmt.Errorf("%w: source has %d bytes, needs %d", ErrBadStrided, len(src), d.Bytes())
	}
	k := int64(0)
	d.ForEachRun(func(off int64) {
		copy(dst[off:off+d.Run], src[k:k+d.Run])
		k += d.Run
	})
	return nil
}

// HostStridedCopy copies the bytes srcDesc describes in src to the places
// dstDesc describes in dst, byte k of one to byte k of the other in packed
// order: the reference for StridedCopy. Both must describe the same number of
// bytes; their runs may differ.
func HostStridedCopy(dst []byte, dstDesc strided.Desc, src []byte, srcDesc strided.Desc) error {
	if err := checkDesc(srcDesc); err != nil {
		return err
	}
	if err := checkDesc(dstDesc); err != nil {
		return err
	}
	if dstDesc.Bytes() != srcDesc.Bytes() {
		return fmt.Errorf("%w: destination describes %d bytes, source %d", ErrBadStrided, dstDesc.Bytes(), srcDesc.Bytes())
	}
	tmp := make([]byte, srcDesc.Bytes())
	if err := HostPack(tmp, src, srcDesc); err != nil {
		return err
	}
	return HostUnpack(dst, dstDesc, tmp)
}

func checkHost(d strided.Desc, n int, what string) error {
	if err := checkDesc(d); err != nil {
		return err
	}
	if int64(n) < d.Extent() {
		return fmt.Errorf("%w: %s has %d bytes, descriptor reaches %d", ErrBadStrided, what, n, d.Extent())
	}
	return nil
}
