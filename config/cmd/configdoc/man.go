// The reference as the man page l4lb.toml(5): the same sections and keys
// as the Markdown page, each key with its syntax, default, context and
// reload effect.

package main

import (
	"fmt"
	"strings"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/docpage"
)

const manDescription = `l4lb reads one TOML file, by default /etc/l4lb/l4lb.toml
(` + "`l4lb run --config FILE`" + `); ` + "`l4lb check FILE`" + ` validates it and lists every
problem with its line. This page lists every key the file may hold, table by
table, each with its Syntax, Default, Context (the tables that take it, and
where it applies) and Reload (when ` + "`l4lb reload`" + ` or SIGHUP applies a
changed value; ` + "`l4lb check --diff FILE`" + ` says the same for a given file).`

// man renders the reference as l4lb.toml(5).
func man(secs []config.Section) []byte {
	m := docpage.NewMan("l4lb.toml", "5", "File Formats", "configuration file of the l4lb load balancer")
	m.Section("SYNOPSIS")
	m.Raw(".B /etc/l4lb/l4lb.toml\n")
	m.Section("DESCRIPTION")
	m.Paragraph(manDescription)
	for _, item := range strings.Split(strings.TrimSpace(conventions), "\n- ") {
		m.Bullet(strings.TrimPrefix(item, "- "))
	}
	documents := sectionOf(secs)
	for _, s := range secs {
		m.Section(s.Header)
		m.Paragraph(s.About)
		for _, k := range s.Keys {
			manKey(m, k, documents)
		}
	}
	m.Section("FILES")
	m.Tagged("/etc/l4lb/l4lb.toml", "The configuration the packaged service (l4lb.service) runs with.")
	m.Tagged("/usr/share/doc/l4lb/examples/", "One commented file per common job; l4lb.toml there shows every key.")
	m.Tagged("/usr/share/doc/l4lb/docs/configuration.md", "This reference as Markdown, generated from the same key tables.")
	m.Section("SEE ALSO")
	m.Raw(".BR l4lb (8)\n")
	return m.Bytes()
}

// manKey writes one key as a subsection: its facts as tagged paragraphs,
// then what it does.
func manKey(m *docpage.Man, k config.KeyRef, documents map[string]string) {
	m.Subsection(k.Name)
	if k.Table {
		m.Paragraph(fmt.Sprintf("`%s`: %s Its keys: the section %s.", k.Form, k.Doc, documents[k.Form]))
		return
	}
	syntax := "`" + k.Name + " = " + k.Form + "`"
	if k.Rule != "" {
		syntax += ": " + k.Rule
	}
	def := k.DefaultNote
	if k.Default != "" {
		def = "`" + k.Name + " = " + k.Default + "`"
	}
	context := make([]string, len(k.Context))
	for i, c := range k.Context {
		context[i] = "`" + c + "`"
	}
	where := strings.Join(context, ", ")
	if k.Scope != "" {
		where += "; " + k.Scope
	}
	m.Tagged("Syntax", syntax)
	m.Tagged("Default", def)
	m.Tagged("Context", where)
	m.Tagged("Reload", k.Reload)
	m.Paragraph(k.Doc)
}
