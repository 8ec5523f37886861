package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/l4lb/l4lb/l4/plane"
)

// Client calls the admin API of the l4lb serving the socket at Socket.
type Client struct {
	Socket string
	// Timeout bounds a whole call; 0 means 10 s.
	Timeout time.Duration
}

// StatusError is an answer other than 2xx, with the API's message.
type StatusError struct {
	Status int
	ErrorBody
}

func (e *StatusError) Error() string {
	if e.ErrorBody.Error == "" {
		return fmt.Sprintf("admin API: %d %s", e.Status, http.StatusText(e.Status))
	}
	return e.ErrorBody.Error
}

// Do sends a request to path (a body is sent as JSON when in is not nil)
// and returns the answer's body. An answer other than 2xx is a
// *StatusError; when it carries a JSON body, out is decoded too (a
// refused reload's problems).
func (c Client) Do(ctx context.Context, method, path string, in, out any) ([]byte, error) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://l4lb"+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API: reading the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		se := statusError(resp, data)
		if out != nil {
			_ = json.Unmarshal(data, out)
		}
		return data, se
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return data, fmt.Errorf("admin API: bad answer: %w", err)
		}
	}
	return data, nil
}

// send sends req over the socket.
func (c Client) send(req *http.Request) (*http.Response, error) {
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.Socket)
	}}}
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, fmt.Errorf("is l4lb running? %w", err)
		}
		return nil, err
	}
	return resp, nil
}

// statusError is the *StatusError of an answer other than 2xx.
func statusError(resp *http.Response, data []byte) *StatusError {
	se := &StatusError{Status: resp.StatusCode}
	if json.Unmarshal(data, &se.ErrorBody) != nil {
		se.ErrorBody.Error = fmt.Sprintf("admin API: %s", resp.Status)
	}
	return se
}

// Capture asks for a capture of vip's packets and calls fn with each as
// it arrives, until the capture ends (its end is returned) or ctx does
// (then the daemon stops sampling as the connection closes). Its only
// time bound is ctx's and the request's Seconds.
func (c Client) Capture(ctx context.Context, vip string, req plane.CaptureRequest, fn func(plane.CapturedPacket) error) (plane.CaptureEnd, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return plane.CaptureEnd{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, "POST", "http://l4lb"+CapturePath(vip), bytes.NewReader(b))
	if err != nil {
		return plane.CaptureEnd{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.send(hreq)
	if err != nil {
		return plane.CaptureEnd{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return plane.CaptureEnd{}, statusError(resp, data)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var line plane.CaptureLine
		if err := dec.Decode(&line); err != nil {
			return plane.CaptureEnd{}, fmt.Errorf("admin API: the capture ended without its last line: %w", err)
		}
		if line.End != nil {
			return *line.End, nil
		}
		if line.Packet != nil {
			if err := fn(*line.Packet); err != nil {
				return plane.CaptureEnd{}, err
			}
		}
	}
}

// CapturePath is the path of a VIP's capture.
func CapturePath(vip string) string {
	return "/vips/" + url.PathEscape(vip) + "/capture"
}

// RebalancePath is the path of a VIP's rebalance.
func RebalancePath(vip string) string {
	return "/vips/" + url.PathEscape(vip) + "/rebalance"
}

// BackendPath is the path of an action on one backend of a VIP.
func BackendPath(vip, backend, action string) string {
	return "/vips/" + url.PathEscape(vip) + "/backends/" + url.PathEscape(backend) + "/" + action
}

// ExplainPath is the path that explains client (IP or IP:PORT) on vip.
func ExplainPath(vip, client string) string {
	return "/vips/" + url.PathEscape(vip) + "/explain?client=" + url.QueryEscape(client)
}
