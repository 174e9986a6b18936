package app

import (
	"context"
	"fmt"
	"log/slog"
)

// AsynqLogger adapts slog to asynq's Logger interface.
type AsynqLogger struct{ Log *slog.Logger }

func (l AsynqLogger) Debug(args ...any) { l.Log.Debug(fmt.Sprint(args...)) }
func (l AsynqLogger) Info(args ...any)  { l.Log.Info(fmt.Sprint(args...)) }
func (l AsynqLogger) Warn(args ...any)  { l.Log.Warn(fmt.Sprint(args...)) }
func (l AsynqLogger) Error(args ...any) { l.Log.Error(fmt.Sprint(args...)) }

// Fatal logs like Error; asynq exits the process itself after calling it.
func (l AsynqLogger) Fatal(args ...any) { l.Log.Error(fmt.Sprint(args...)) }

// redisLog writes go-redis's own messages (a dial that keeps failing, a
// sentinel naming a new master) through the process's logger, as JSON like
// every other line, where go-redis would print plain text to stderr.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}
