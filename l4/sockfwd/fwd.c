//go:build ignore

/* fwd.c: sk_skb_fwd, the stream verdict of l4lb's kernel forwarding. Both
 * sockets of a proxied TCP connection sit in socks (keyed by their socket
 * cookie) and each has an entry in conns naming its peer. An skb that
 * arrives on one is counted and redirected to the peer's send path
 * (egress: bpf_sk_redirect_hash without BPF_F_INGRESS), in softirq,
 * without waking l4lb:
 *
 *   skb on a socket            verdict              change
 *   -------------------------  -------------------  -----------------------------
 *   cookie in conns            SK_PASS (redirect)   bytes += len, last_ns = now
 *   cookie in conns, peer gone SK_DROP (the helper) bytes += len
 *   cookie not in conns        SK_PASS              none: the socket's own queue
 *   no data (a bare FIN)       SK_DROP              none
 *
 * A peer that is gone is one l4lb is resetting: the connection is over.
 * The FIN is never an skb the program sees: l4lb passes it on (RDHUP). */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* conn_dir is one socket's direction: the bytes it received and the
 * program sent on to its peer. */
struct conn_dir {
	__u64 peer;    /* the peer socket's cookie, its key in socks */
	__u64 bytes;   /* bytes redirected from this socket to the peer */
	__u64 last_ns; /* CLOCK_MONOTONIC (coarse) when the last skb came */
};

/* socks: the forwarded sockets, keyed by socket cookie; the program is
 * attached here, so a socket runs it from the moment it enters. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u64);
	__type(value, __u32);
} socks SEC(".maps");

/* peers: the same sockets as redirect targets, without a program. A pair
 * enters peers before socks, so that the first skb of either side finds
 * its peer (a redirect to a socket not in the map drops the skb). */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u64);
	__type(value, __u32);
} peers SEC(".maps");

/* conns: each forwarded socket's direction, keyed by its cookie; written
 * by l4lb before the socket enters socks, read at idle checks and ends. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u64);
	__type(value, struct conn_dir);
} conns SEC(".maps");

SEC("sk_skb/stream_verdict")
int sk_skb_fwd(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct conn_dir *d = bpf_map_lookup_elem(&conns, &cookie);

	if (!d)
		return SK_PASS;
	/* A FIN without data: redirected, the peer's psock would send zero
	 * bytes, take that for a broken pipe and set EPIPE on the peer. The
	 * FIN itself is TCP's, already seen; l4lb passes it on. */
	if (!skb->len)
		return SK_DROP;
	__sync_fetch_and_add(&d->bytes, skb->len);
	d->last_ns = bpf_ktime_get_coarse_ns();
	return bpf_sk_redirect_hash(skb, &peers, &d->peer, 0);
}

char __license[] SEC("license") = "GPL";
