// Package testutil holds what l4lb's tests share: privilege gating, network
// namespaces with veth links, helpers that start real servers, and a real
// headless Chromium for the status page.
package testutil
