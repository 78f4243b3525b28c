package strided

import (
	"errors"
	"testing"
)

func TestStridedValidate(t *testing.T) {
	ok := []Desc{
		{},
		{Run: 5},
		{Offset: 3, Run: 4, Count: []int64{2, 3}, Stride: []int64{100, 10}},
		{Run: 4, Count: []int64{0}, Stride: []int64{1}},
		{Run: 4, Count: []int64{1, 1, 1, 1, 1, 1, 1}, Stride: make([]int64, 7)},
		{Run: 4, Count: make([]int64, 16), Stride: make([]int64, 16)},
	}
	for _, d := range ok {
		if err := d.Validate(); err != nil {
			t.Errorf("%+v: %v", d, err)
		}
	}
	bad := []Desc{
		{Offset: -1, Run: 1},
		{Run: -1},
		{Run: 1, Count: []int64{2}},
		{Run: 1, Count: []int64{2}, Stride: []int64{-1}},
		{Run: 1, Count: []int64{-2}, Stride: []int64{1}},
		{Run: 1, Count: []int64{0, -1}, Stride: []int64{1, 1}},
		{Run: 1, Count: make([]int64, 17), Stride: make([]int64, 17)},
		{Run: 1 << 40, Count: []int64{1 << 30}, Stride: []int64{1 << 40}},
		{Run: 1, Count: []int64{1 << 40, 1 << 40}, Stride: []int64{1, 1}},
	}
	for _, d := range bad {
		if err := d.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", d, err)
		}
	}
}

func TestStridedBytesExtent(t *testing.T) {
	d := Desc{Offset: 3, Run: 4, Count: []int64{2, 3}, Stride: []int64{100, 10}}
	if got := d.Bytes(); got != 24 {
		t.Errorf("Bytes = %d, want 24", got)
	}
	if got := d.Extent(); got != 3+100+20+4 {
		t.Errorf("Extent = %d, want 127", got)
	}
	if got := (Desc{Offset: 9, Run: 4, Count: []int64{0}, Stride: []int64{1}}).Extent(); got != 0 {
		t.Errorf("empty Extent = %d, want 0", got)
	}
}

func TestCheckDisjoint(t *testing.T) {
	ok := []Desc{
		{Run: 4, Count: []int64{3}, Stride: []int64{4}},
		{Run: 4, Count: []int64{2, 3}, Stride: []int64{4, 8}}, // transposed
		{Run: 4, Count: []int64{3, 1}, Stride: []int64{4, 0}},
	}
	for _, d := range ok {
		if err := d.CheckDisjoint(); err != nil {
			t.Errorf("%+v: %v", d, err)
		}
	}
	bad := []Desc{
		{Run: 4, Count: []int64{3}, Stride: []int64{3}},
		{Run: 4, Count: []int64{2}, Stride: []int64{0}},
		{Run: 2, Count: []int64{2, 3}, Stride: []int64{4, 2}},
	}
	for _, d := range bad {
		if err := d.CheckDisjoint(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", d, err)
		}
	}
}

func TestFits(t *testing.T) {
	d := Desc{Offset: 3, Run: 4, Count: []int64{2, 3}, Stride: []int64{100, 10}} // reaches byte 127
	if err := d.Fits(127); err != nil {
		t.Errorf("Fits(127): %v", err)
	}
	if err := d.Fits(126); !errors.Is(err, ErrInvalid) {
		t.Errorf("Fits(126) = %v, want ErrInvalid", err)
	}
	if err := (Desc{Offset: -1, Run: 2}).Fits(10); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative offset fits: %v", err)
	}
	if err := (Desc{Offset: 50, Run: 4, Count: []int64{0}, Stride: []int64{8}}).Fits(0); err != nil {
		t.Errorf("no bytes must fit anywhere: %v", err)
	}
}
