// Package sim is a flow-level simulator of m2n's reshards on a modelled
// cluster.
package sim
