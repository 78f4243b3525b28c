module github.com/m2n-dev/m2n

go 1.26.0

require github.com/NVIDIA/go-nvml v0.13.4-1
