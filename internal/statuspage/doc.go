// Package statuspage serves l4lb's live status page on the metrics
// listener: one read-only HTML page, with its script and style embedded in
// the binary (no external asset: it works on an air-gapped host), that
// refreshes itself in place from the status JSON it also serves. It reads
// the status wire types (l4/plane) and nothing else of the project.
//
// Hazards: every name and note on the page is operator or server text
// (reasons, check errors, DNS names); the script writes them with
// textContent only, and the page's Content-Security-Policy allows no
// inline script and nothing from another origin. Nothing here changes
// state: the handlers answer GET (and HEAD) alone.
package statuspage
