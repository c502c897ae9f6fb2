package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/services/agtp"
)

var shells = []string{"bash", "zsh", "fish"}

// runCompletion prints a completion script for a shell. The scripts are
// generated from the same flag and command tables the command parses
// with, so a new flag is completed the day it is added.
func runCompletion(_ context.Context, args []string, env Env) int {
	if len(args) != 1 || !slices.Contains(shells, args[0]) {
		return usageError(env, "completion wants one of: "+strings.Join(shells, ", ")+
			"\n  e.g. source <(agtp completion bash), or agtp completion fish > ~/.config/fish/completions/agtp.fish")
	}
	fs, _ := requestFlags(io.Discard)
	c := completion{flags: fs.specs, methods: agtp.FloorMethods()}
	switch args[0] {
	case "bash":
		c.bash(env.Stdout)
	case "zsh":
		c.zsh(env.Stdout)
	case "fish":
		c.fish(env.Stdout)
	}
	return ExitOK
}

type completion struct {
	flags   []flagSpec
	methods []string
}

// spelled is a flag name as typed: -H or --header.
func spelled(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// takesFile reports a flag whose value is a file name.
func (f flagSpec) takesFile() bool { return f.arg == "FILE" || f.arg == "DATA" }

func (c completion) flagWords() []string {
	var out []string
	for _, f := range c.flags {
		for _, n := range f.names {
			out = append(out, spelled(n))
		}
	}
	return out
}

func (c completion) bash(w io.Writer) {
	var fileFlags, valueFlags []string
	for _, f := range c.flags {
		for _, n := range f.names {
			switch {
			case f.takesFile():
				fileFlags = append(fileFlags, spelled(n))
			case f.arg != "":
				valueFlags = append(valueFlags, spelled(n))
			}
		}
	}
	fmt.Fprintf(w, `# bash completion for agtp; load with: source <(agtp completion bash)
_agtp() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    case "$prev" in
        %s) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        %s) COMPREPLY=(); return ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "%s" -- "$cur")); return
    fi
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "%s %s" -- "$cur")); return
    fi
    case "${COMP_WORDS[1]}" in
`, strings.Join(fileFlags, "|"), strings.Join(valueFlags, "|"), strings.Join(c.flagWords(), " "),
		strings.Join(c.methods, " "), strings.Join(commandOrder, " "))
	for _, name := range commandOrder {
		if words := commands[name].words; len(words) > 0 {
			fmt.Fprintf(w, "        %s) [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W \"%s\" -- \"$cur\")) || COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n",
				name, strings.Join(words, " "))
		}
	}
	fmt.Fprint(w, `    esac
    compopt -o nospace
    COMPREPLY=($(compgen -W "agtp://" -- "$cur"))
}
complete -o default -F _agtp agtp
`)
}

// zshQuote escapes what _arguments gives meaning to in a description.
var zshQuote = strings.NewReplacer(`[`, `\[`, `]`, `\]`, `:`, `\:`, `'`, `'\''`)

func (c completion) zsh(w io.Writer) {
	fmt.Fprint(w, "#compdef agtp\n# zsh completion for agtp; load with: source <(agtp completion zsh)\n_agtp() {\n    local state\n    _arguments -s \\\n")
	for _, f := range c.flags {
		desc := zshQuote.Replace(f.usage)
		for _, n := range f.names {
			switch {
			case f.takesFile():
				fmt.Fprintf(w, "        '%s[%s]:%s:_files' \\\n", spelled(n), desc, strings.ToLower(f.arg))
			case f.arg != "":
				fmt.Fprintf(w, "        '%s[%s]:%s:' \\\n", spelled(n), desc, zshQuote.Replace(strings.ToLower(f.arg)))
			default:
				fmt.Fprintf(w, "        '%s[%s]' \\\n", spelled(n), desc)
			}
		}
	}
	fmt.Fprintf(w, "        '1:method or command:(%s %s)' \\\n        '2: :->second' \\\n        '*:file:_files'\n",
		strings.Join(c.methods, " "), strings.Join(commandOrder, " "))
	fmt.Fprint(w, "    case $state in\n    second)\n        case $words[2] in\n")
	for _, name := range commandOrder {
		if words := commands[name].words; len(words) > 0 {
			fmt.Fprintf(w, "        %s) compadd -- %s ;;\n", name, strings.Join(words, " "))
		}
	}
	fmt.Fprint(w, `        *) _message 'agtp:// URI' ;;
        esac ;;
    esac
}
if [ "$funcstack[1]" = "_agtp" ]; then _agtp "$@"; else compdef _agtp agtp; fi
`)
}

// fishQuote quotes a description for fish's single-quoted strings.
var fishQuote = strings.NewReplacer(`\`, `\\`, `'`, `\'`)

func (c completion) fish(w io.Writer) {
	fmt.Fprint(w, "# fish completion for agtp; save as ~/.config/fish/completions/agtp.fish\ncomplete -c agtp -f\n")
	fmt.Fprintf(w, "complete -c agtp -n '__fish_use_subcommand' -a '%s' -d 'AGTP method'\n", strings.Join(c.methods, " "))
	for _, name := range commandOrder {
		cmd := commands[name]
		fmt.Fprintf(w, "complete -c agtp -n '__fish_use_subcommand' -a %s -d '%s'\n", name, fishQuote.Replace(cmd.summary))
		if len(cmd.words) > 0 {
			fmt.Fprintf(w, "complete -c agtp -n '__fish_seen_subcommand_from %s' -a '%s'\n", name, strings.Join(cmd.words, " "))
		}
	}
	for _, f := range c.flags {
		var b strings.Builder
		b.WriteString("complete -c agtp")
		for _, n := range f.names {
			if len(n) == 1 {
				fmt.Fprintf(&b, " -s %s", n)
			} else {
				fmt.Fprintf(&b, " -l %s", n)
			}
		}
		switch {
		case f.takesFile():
			b.WriteString(" -r -F")
		case f.arg != "":
			b.WriteString(" -r")
		}
		fmt.Fprintf(&b, " -d '%s'\n", fishQuote.Replace(f.usage))
		io.WriteString(w, b.String())
	}
}
