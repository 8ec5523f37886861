// Package admin is l4lb's admin API: JSON over HTTP on a Unix socket that
// only root (or the daemon's own user) may use. The daemon serves it
// (Serve); the command-line verbs use it (Client). Errors are JSON bodies
// ({"error": "..."}) with an HTTP status that says what kind of error.
package admin
