package app

import (
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
