// dnstype.go: the DNS query types a dns health check may ask.

package l4

// DNSType is the query type of a dns check. The zero value is A.
type DNSType uint8

// DNS query types.
const (
	DNSTypeA DNSType = iota
	DNSTypeAAAA
	DNSTypeNS
	DNSTypeSOA
	DNSTypeCNAME
	DNSTypeMX
	DNSTypeTXT
	DNSTypeSRV
	DNSTypePTR
)

var dnsTypeNames = [...]string{
	DNSTypeA: "A", DNSTypeAAAA: "AAAA", DNSTypeNS: "NS", DNSTypeSOA: "SOA", DNSTypeCNAME: "CNAME",
	DNSTypeMX: "MX", DNSTypeTXT: "TXT", DNSTypeSRV: "SRV", DNSTypePTR: "PTR",
}

// The types' numbers on the wire (RFC 1035, 3596, 2782).
var dnsTypeCodes = [...]uint16{
	DNSTypeA: 1, DNSTypeAAAA: 28, DNSTypeNS: 2, DNSTypeSOA: 6, DNSTypeCNAME: 5,
	DNSTypeMX: 15, DNSTypeTXT: 16, DNSTypeSRV: 33, DNSTypePTR: 12,
}

func (t DNSType) String() string { return enumName(t, "dnstype", dnsTypeNames[:]) }

// Code is the type's number in a DNS question (0 for an unknown type).
func (t DNSType) Code() uint16 {
	if int(t) < len(dnsTypeCodes) {
		return dnsTypeCodes[t]
	}
	return 0
}

// DNSTypeNames lists the query types as the config names them.
func DNSTypeNames() []string { return dnsTypeNames[:] }
