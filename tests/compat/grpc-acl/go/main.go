// The Go 5.x SDK (github.com/apache/rocketmq-clients/golang/v5, pinned by ../../grpc-go/go.mod) against a gRPC
// endpoint with ACL on; built and run by ../../grpc-acl.sh. Credentials go in the SDK's Config
// (credentials.SessionCredentials); the connection is the SDK's default (TLS). Checks, one "ok go/NAME" or
// "FAIL go/NAME: reason" line each on stdout (the refusals the SDK returned are printed on stderr):
//
//	send-permitted     the producer user (PUB on ACL_TOPIC) sends ACL_MESSAGES messages
//	receive-permitted  the consumer user (SUB on ACL_TOPIC and ACL_GROUP) receives every one with a SimpleConsumer
//	                   and acks each
//	send-denied-topic  the producer user sending to ACL_DENIED_TOPIC (no permission) fails with UNAUTHORIZED (40100)
//	                   naming "PUB on topic ACL_DENIED_TOPIC"
//	wrong-secret       the producer user with a wrong secret key fails with 40100, "check signature failed"
//
// Environment: GRPC_ENDPOINT, ACL_TOPIC, ACL_DENIED_TOPIC, ACL_GROUP, ACL_PRODUCER (ak:sk), ACL_CONSUMER (ak:sk),
// ACL_MESSAGES (default 20), ACL_RECEIVE_SECS (default 30), ACL_LOG_DIR (the SDK's logs).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/apache/rocketmq-clients/golang/v5/pkg/zaplog"
)

const sdkModule = "github.com/apache/rocketmq-clients/golang/v5"

// codeUnauthorized is UNAUTHORIZED; codeMessageNotFound is what a receive that found nothing returns.
const (
	codeUnauthorized    = 40100
	codeMessageNotFound = 40401
)

var t0 = time.Now()
var failed = 0

func env(name, def string) string {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		if def == "" {
			fmt.Fprintln(os.Stderr, name+" is not set")
			os.Exit(2)
		}
		return def
	}
	return v
}

func diag(check, line string) {
	fmt.Fprintf(os.Stderr, "[%s] %7.3f %s\n", check, time.Since(t0).Seconds(), line)
}

func ok(check, detail string) { fmt.Printf("ok go/%s (%s)\n", check, detail) }

func fail(check, reason string) {
	failed++
	fmt.Printf("FAIL go/%s: %s\n", check, strings.ReplaceAll(reason, "\n", " "))
}

func sdkVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == sdkModule {
				return d.Version
			}
		}
	}
	return "unknown"
}

// config is the SDK's Config for endpoint, group and the credentials "ak:sk".
func config(group, userPass string) *rmq.Config {
	ak, sk, _ := strings.Cut(userPass, ":")
	return &rmq.Config{Endpoint: env("GRPC_ENDPOINT", ""), ConsumerGroup: group,
		Credentials: &credentials.SessionCredentials{AccessKey: ak, AccessSecret: sk}}
}

func message(topic, body string) *rmq.Message {
	m := &rmq.Message{Topic: topic, Body: []byte(body)}
	m.SetTag("acl")
	m.SetKeys(body)
	return m
}

// send starts a producer of userPass for topic and sends bodies; returns how many were sent.
func send(userPass, topic string, bodies []string) (int, error) {
	p, err := rmq.NewProducer(config("", userPass), rmq.WithTopics(topic))
	if err != nil {
		return 0, err
	}
	if err := p.Start(); err != nil {
		return 0, fmt.Errorf("start: %w", err)
	}
	defer func() { _ = p.GracefulStop() }()
	for i, b := range bodies {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.Send(ctx, message(topic, b))
		cancel()
		if err != nil {
			return i, err
		}
	}
	return len(bodies), nil
}

// expectRefusal passes CHECK when err is the SDK's ErrRpcStatus with code 40100 and a message containing reason.
func expectRefusal(check, reason string, err error, took time.Duration) {
	if err == nil {
		fail(check, "succeeded, expected a refusal with UNAUTHORIZED (40100)")
		return
	}
	fmt.Fprintf(os.Stderr, "go/%s returned: %v\n", check, err)
	// A refusal at start-up (the producer's route query) comes back flattened into the SDK's own error text
	// ("startUp err=... err=CODE: UNAUTHORIZED, MESSAGE: ..."), the ErrRpcStatus no longer in the chain.
	var st *rmq.ErrRpcStatus
	unauthorized := errors.As(err, &st) && st.GetCode() == codeUnauthorized
	unauthorized = unauthorized || strings.Contains(err.Error(), "CODE: UNAUTHORIZED, MESSAGE: ")
	switch {
	case !unauthorized:
		fail(check, "expected an ErrRpcStatus with code 40100 (UNAUTHORIZED), got: "+err.Error())
	case !strings.Contains(err.Error(), reason):
		fail(check, fmt.Sprintf("refused with 40100 but the reason lacks %q: %v", reason, err))
	default:
		ok(check, fmt.Sprintf("refused with 40100 in %d ms", took.Milliseconds()))
	}
}

func main() {
	topic, denied, group := env("ACL_TOPIC", ""), env("ACL_DENIED_TOPIC", ""), env("ACL_GROUP", "")
	producer, consumer := env("ACL_PRODUCER", ""), env("ACL_CONSUMER", "")
	n, _ := strconv.Atoi(env("ACL_MESSAGES", "20"))
	receiveSecs, _ := strconv.Atoi(env("ACL_RECEIVE_SECS", "30"))

	// The SDK's logs go below ACL_LOG_DIR, not to ~/logs and /tmp (as grpc-go/g.go's setupSDK does).
	sdkDir := filepath.Join(env("ACL_LOG_DIR", os.TempDir()), "sdk")
	_ = os.MkdirAll(sdkDir, 0o755)
	os.Setenv("rocketmq.client.logRoot", sdkDir)
	os.Setenv("mq.consoleAppender.enabled", "false")
	rmq.ResetLogger()
	grpcLogger := zaplog.New(zaplog.WithFileName(filepath.Join(sdkDir, "grpc.log")))
	newRpcClient := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		return newRpcClient(target, append(opts, rmq.WithRpcClientConnOption(rmq.WithZapLogger(grpcLogger)))...)
	}
	diag("main", fmt.Sprintf("rocketmq-clients/golang %s against %s (TLS: %v, the SDK's default)",
		sdkVersion(), env("GRPC_ENDPOINT", ""), rmq.EnableSsl))

	// send-permitted
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("acl-go-%d", i)
	}
	start := time.Now()
	sent, err := send(producer, topic, bodies)
	if err != nil {
		fail("send-permitted", fmt.Sprintf("%d of %d sent, then: %v", sent, n, err))
	} else {
		ok("send-permitted", fmt.Sprintf("%d messages in %d ms", n, time.Since(start).Milliseconds()))
	}
	want := map[string]bool{}
	for _, b := range bodies[:sent] {
		want[b] = true
	}

	// receive-permitted
	start = time.Now()
	received, problems := map[string]bool{}, []string{}
	c, err := rmq.NewSimpleConsumer(config(group, consumer), rmq.WithSimpleAwaitDuration(5*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err == nil {
		err = c.Start()
	}
	if err != nil {
		fail("receive-permitted", "SimpleConsumer: "+err.Error())
	} else {
		deadline := start.Add(time.Duration(receiveSecs) * time.Second)
		for len(received) < len(want) && time.Now().Before(deadline) && len(problems) < 10 {
			views, err := c.Receive(context.Background(), 16, 15*time.Second)
			var st *rmq.ErrRpcStatus
			if errors.As(err, &st) && st.GetCode() == codeMessageNotFound {
				continue
			}
			if err != nil {
				problems = append(problems, "receive: "+err.Error())
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for _, v := range views {
				b := string(v.GetBody())
				if !want[b] {
					problems = append(problems, "unexpected message "+b)
				}
				received[b] = true
				if err := c.Ack(context.Background(), v); err != nil {
					problems = append(problems, "ack of "+b+": "+err.Error())
				}
			}
		}
		_ = c.GracefulStop()
		switch {
		case len(want) == 0:
			fail("receive-permitted", "nothing was sent")
		case len(problems) > 0:
			fail("receive-permitted", strings.Join(problems, "; "))
		case len(received) < len(want):
			fail("receive-permitted", fmt.Sprintf("%d of %d received within %d s", len(received), len(want),
				receiveSecs))
		default:
			ok("receive-permitted", fmt.Sprintf("%d received and acked in %d ms", len(received),
				time.Since(start).Milliseconds()))
		}
	}

	// The refusals.
	start = time.Now()
	_, err = send(producer, denied, []string{"acl-go-denied"})
	expectRefusal("send-denied-topic", "PUB on topic "+denied, err, time.Since(start))
	ak, _, _ := strings.Cut(producer, ":")
	start = time.Now()
	_, err = send(ak+":not-the-secret-key", topic, []string{"acl-go-wrong-secret"})
	expectRefusal("wrong-secret", "check signature failed for AccessKey "+ak, err, time.Since(start))

	if failed > 0 {
		os.Exit(1)
	}
}
