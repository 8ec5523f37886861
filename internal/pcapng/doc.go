// Package pcapng writes packet captures in the pcapng format (the IETF
// draft "PCAP Next Generation Capture File Format"), which tshark and
// Wireshark read: one section, one Ethernet interface with nanosecond
// timestamps, and Enhanced Packet Blocks that carry a comment each (the
// reason for pcapng over classic pcap, which has no per-packet comment).
// It writes only; reading is tshark's job.
package pcapng
