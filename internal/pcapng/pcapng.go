// The writer: a section header, an interface, then packets.

package pcapng

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// Block types and option codes used here.
const (
	blockSection   = 0x0A0D0D0A
	blockInterface = 0x00000001
	blockPacket    = 0x00000006
	byteOrderMagic = 0x1A2B3C4D

	optEnd       = 0
	optComment   = 1
	optShbApp    = 4 // shb_userappl
	optIfName    = 2 // if_name
	optIfTsresol = 9 // if_tsresol

	linkEthernet = 1
)

// Writer writes one section with one Ethernet interface. Its methods
// return the underlying writer's errors; it buffers nothing.
type Writer struct {
	w   io.Writer
	buf []byte // the block being built, reused
}

// NewWriter writes the section header (naming app as the writer) and an
// Ethernet interface called ifName whose packets are cut at snapLen.
func NewWriter(w io.Writer, app, ifName string, snapLen int) (*Writer, error) {
	pw := &Writer{w: w}
	b := pw.begin(blockSection)
	b = binary.LittleEndian.AppendUint32(b, byteOrderMagic)
	b = binary.LittleEndian.AppendUint16(b, 1) // version 1.0
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint64(b, ^uint64(0)) // section length unknown
	b = appendOption(b, optShbApp, []byte(app))
	b = appendOption(b, optEnd, nil)
	if err := pw.end(b); err != nil {
		return nil, err
	}
	b = pw.begin(blockInterface)
	b = binary.LittleEndian.AppendUint16(b, linkEthernet)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(snapLen))
	b = appendOption(b, optIfName, []byte(ifName))
	b = appendOption(b, optIfTsresol, []byte{9}) // nanoseconds
	b = appendOption(b, optEnd, nil)
	if err := pw.end(b); err != nil {
		return nil, err
	}
	return pw, nil
}

// WritePacket writes one packet: data is what was kept of a frame of
// origLen bytes, received at t; comment (may be empty) is shown with it.
func (pw *Writer) WritePacket(t time.Time, data []byte, origLen int, comment string) error {
	if origLen < len(data) {
		return fmt.Errorf("pcapng: packet of %d bytes kept %d", origLen, len(data))
	}
	ns := uint64(t.UnixNano())
	b := pw.begin(blockPacket)
	b = binary.LittleEndian.AppendUint32(b, 0) // interface 0
	b = binary.LittleEndian.AppendUint32(b, uint32(ns>>32))
	b = binary.LittleEndian.AppendUint32(b, uint32(ns))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = binary.LittleEndian.AppendUint32(b, uint32(origLen))
	b = append(b, data...)
	b = pad(b)
	if comment != "" {
		b = appendOption(b, optComment, []byte(comment))
		b = appendOption(b, optEnd, nil)
	}
	return pw.end(b)
}

// begin starts a block: its type and a placeholder for its length.
func (pw *Writer) begin(typ uint32) []byte {
	b := binary.LittleEndian.AppendUint32(pw.buf[:0], typ)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// end fills in the block's length at both ends and writes it.
func (pw *Writer) end(b []byte) error {
	n := uint32(len(b) + 4)
	binary.LittleEndian.PutUint32(b[4:8], n)
	b = binary.LittleEndian.AppendUint32(b, n)
	pw.buf = b
	if _, err := pw.w.Write(b); err != nil {
		return fmt.Errorf("pcapng: %w", err)
	}
	return nil
}

// appendOption appends one option, padded to 32 bits.
func appendOption(b []byte, code uint16, v []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	return pad(append(b, v...))
}

// pad appends zeros up to a multiple of four bytes.
func pad(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
