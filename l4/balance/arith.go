// Overflow-safe integer comparisons of load ratios, without floats or division.

package balance

import "math/bits"

// Load ratios (live flows per weight, cost per weight) are compared by
// cross-multiplication: a/wa < b/wb exactly when a*wb < b*wa. No rounding,
// no division on the hot path, no overflow: 128-bit products where the
// factors may need them, 64-bit ones where counts are capped (loadCap).

// less128 reports whether (ah, al) < (bh, bl) as 128-bit unsigned numbers.
func less128(ah, al, bh, bl uint64) bool {
	return ah < bh || ah == bh && al < bl
}

// lessRatio reports whether a/wa < b/wb.
func lessRatio(a, wa, b, wb uint64) bool {
	lh, ll := bits.Mul64(a, wb)
	rh, rl := bits.Mul64(b, wa)
	return less128(lh, ll, rh, rl)
}

// flowsOf returns a live flow count as an unsigned number (it is never
// negative, l4.FlowCounter guards underflow, but a cast must not wrap).
func flowsOf(n int64) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}
