// splice(2) without blocking: how the event loops move bulk bytes.
package proxy

import "golang.org/x/sys/unix"

// spliceRetry splices up to n bytes without blocking, retrying EINTR.
func spliceRetry(from, to, n int) (int, error) {
	for {
		w, err := unix.Splice(from, nil, to, nil, n, unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return int(w), nil
	}
}
