// Package docpage writes l4lb's generated documentation pages (the
// configuration reference, the counters page) and checks that the pages
// committed in docs/ are what their generators make now.
package docpage
