// Package testutil holds what l4lb's tests share: privilege gating, network
// namespaces with veth links, and helpers that start real servers.
package testutil
