// Package docpage writes l4lb's generated documentation pages (the
// configuration reference, the counters page, the man pages as roff) and
// checks that the pages committed in docs/ are what their generators make
// now and that man renders them without a warning.
package docpage
