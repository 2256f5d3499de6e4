package stripe

import (
	"context"
	"fmt"
	"log/slog"
)

// leveledLogger passes stripe-go's log lines to slog at the levels
// Config.Logger documents.
type leveledLogger struct{ l *slog.Logger }

// Debugf drops the line: stripe-go logs whole response bodies at debug.
func (leveledLogger) Debugf(string, ...any) {}

func (g leveledLogger) Infof(format string, v ...any)  { g.log(slog.LevelDebug, format, v) }
func (g leveledLogger) Errorf(format string, v ...any) { g.log(slog.LevelDebug, format, v) }
func (g leveledLogger) Warnf(format string, v ...any)  { g.log(slog.LevelWarn, format, v) }

func (g leveledLogger) log(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if !g.l.Enabled(ctx, level) {
		return
	}
	g.l.Log(ctx, level, fmt.Sprintf(format, v...))
}
