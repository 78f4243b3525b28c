module github.com/m2n-dev/m2n

go 1.26.0
