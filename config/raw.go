// Raw decoding: the file's shape, and its values untyped.

package config

// opt is one raw TOML value. It records whether the key was present at all
// (so "set to 0" differs from "not set") and keeps a value of the wrong type
// instead of failing, so that the type error is reported with its key path
// and line alongside every other problem rather than ending the decode.
type opt[T any] struct {
	val T
	set bool
	bad any // the value, when it was not a T
}

// UnmarshalTOML implements toml.Unmarshaler. An integer is accepted where
// a float is expected.
func (o *opt[T]) UnmarshalTOML(data any) error {
	o.set = true
	if v, ok := data.(T); ok {
		o.val = v
		return nil
	}
	if i, ok := data.(int64); ok {
		if f, ok := any(&o.val).(*float64); ok {
			*f = float64(i)
			return nil
		}
	}
	o.bad = data
	return nil
}

// rawFile is the file's shape: its tables and arrays of tables, with no
// keys. Decoding into it finds a table where a value should be (or the
// other way round); the keys are read from the file decoded again as
// maps (rawTable), through the key tables, and a key no table has is
// left undecoded: unknown.
type rawFile struct {
	Global   struct{}    `toml:"global"`
	Defaults rawDefaults `toml:"defaults"`
	VIPs     []rawVIP    `toml:"vip"`
	XDP      *struct{}   `toml:"xdp"`
	BGP      *rawBGP     `toml:"bgp"`
}

type rawDefaults struct {
	Health struct{} `toml:"health"`
}

type rawVIP struct {
	Health   struct{}   `toml:"health"`
	Backends []struct{} `toml:"backend"`
	Routes   []rawRoute `toml:"route"`
}

type rawRoute struct {
	Health   struct{}   `toml:"health"`
	Backends []struct{} `toml:"backend"`
}

type rawBGP struct {
	Peers []struct{} `toml:"peer"`
}
