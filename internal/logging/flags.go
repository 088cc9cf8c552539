package logging

import (
	"github.com/spf13/pflag"
	"go.uber.org/zap"
)

// CommandFlags are a command line's --log-level and --log-format, shared by
// etcd-agent and etcd-agent-lab.
type CommandFlags struct {
	Level, Format string
}

// Register adds --log-level and --log-format to fs.
func (f *CommandFlags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.Format, "log-format", FormatAuto, "log format: auto (console on a terminal, else json), json, console")
}

// Logger builds the command's logger and routes client-go's own logs (klog)
// through it.
func (f *CommandFlags) Logger() (*zap.Logger, error) {
	log, err := New(f.Level, f.Format)
	if err != nil {
		return nil, err
	}
	BridgeKlog(log)
	return log, nil
}
