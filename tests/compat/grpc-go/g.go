// Shared plumbing of the gRPC checks (the Go counterpart of grpc-java's G.java): environment, resource names, client
// construction, deadline-based waiting, a background SimpleConsumer receive loop, message content comparison and the
// PASS/FAIL output contract.
//
// Output contract: every check prints exactly one line on stdout, "PASS grpc-go-VERSION/CHECK" or
// "FAIL grpc-go-VERSION/CHECK: reason". Everything else goes to stderr, each line prefixed with "[CHECK] seconds"
// (or "[SCENARIO] seconds") so grpc.sh can show a failed check's own diagnostics. The SDK logs to files below
// GRPC_LOG_DIR (sdk/), never to stdout.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/pkg/zaplog"
	"go.uber.org/zap"
)

const sdkModule = "github.com/apache/rocketmq-clients/golang/v5"

// invisible is the receive invisible duration used throughout (10 s, the minimum the proxy accepts for receive).
const invisible = 10 * time.Second

// await is the SimpleConsumer long-polling duration (the proxy clamps long polling to at least 5 s).
const await = 5 * time.Second

// requestTimeout is the SDK's per-RPC timeout (its default is 3 s; grpc-java uses 10 s).
const requestTimeout = 10 * time.Second

// ---------------------------------------------------------------- environment

func env(name, def string) string {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def
	}
	return v
}

func endpoint() string {
	e := env("GRPC_ENDPOINT", "")
	if e == "" {
		fatal("GRPC_ENDPOINT (host:port of the gRPC endpoint) is not set")
	}
	return e
}

func useTLS() bool {
	b, _ := strconv.ParseBool(env("GRPC_TLS", "false"))
	return b
}

// runID is shared by grpc.sh (which creates the topics and groups with mqadmin) and the programs.
func runID() string {
	r := env("GRPC_RUN_ID", "")
	if r == "" {
		fatal("GRPC_RUN_ID is not set (grpc.sh sets it; grpc-java's Resources prints the names)")
	}
	return r
}

var clientVersion = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == sdkModule {
				if d.Replace != nil {
					d = d.Replace
				}
				return strings.TrimPrefix(d.Version, "v")
			}
		}
	}
	return "unknown"
}()

func checkName(check string) string {
	return "grpc-go-" + clientVersion + "/" + check
}

// timeout is a wait's limit: DEFAULT seconds, scaled by GRPC_TIMEOUT_SCALE (default 1).
func timeout(defaultSecs float64) time.Duration {
	scale, err := strconv.ParseFloat(env("GRPC_TIMEOUT_SCALE", "1"), 64)
	if err != nil || scale <= 0 {
		scale = 1
	}
	return time.Duration(defaultSecs * scale * float64(time.Second))
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "[main] "+msg)
	os.Exit(2)
}

var grpcLogger *zap.Logger

// setupSDK points the SDK's logs into GRPC_LOG_DIR/sdk and selects plaintext or TLS (any certificate accepted: the
// SDK's default tls.Config has InsecureSkipVerify).
func setupSDK() {
	logDir := env("GRPC_LOG_DIR", os.TempDir())
	sdkDir := filepath.Join(logDir, "sdk")
	_ = os.MkdirAll(sdkDir, 0o755)
	os.Setenv("rocketmq.client.logRoot", sdkDir)
	os.Setenv("rocketmq.client.logFileName", "rocketmq_client_go-"+env("GRPC_PROGRAM", "main")+".log")
	os.Setenv("mq.consoleAppender.enabled", "false")
	if lvl := env("GRPC_SDK_LOG_LEVEL", ""); lvl != "" {
		os.Setenv("rocketmq.client.logLevel", lvl)
	}
	rmq.ResetLogger()
	// The SDK logs every unary RPC to /tmp/rocketmq-logger.log; its connections are made by the package variable
	// NewRpcClient (the client options' WithConnOptions are never used), so that is where the logger can be set.
	grpcLogger = zaplog.New(zaplog.WithFileName(filepath.Join(sdkDir, "grpc-"+env("GRPC_PROGRAM", "main")+".log")))
	newRpcClient := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		return newRpcClient(target, append(opts, rmq.WithRpcClientConnOption(rmq.WithZapLogger(grpcLogger)))...)
	}
	rmq.EnableSsl = useTLS()
}

func config(group string) *rmq.Config {
	return &rmq.Config{Endpoint: endpoint(), ConsumerGroup: group}
}

// clientFunc makes the SDK's client with a 10 s request timeout.
func clientFunc(c *rmq.Config, opts ...rmq.ClientOption) (rmq.Client, error) {
	return rmq.NewClient(c, append(opts, rmq.WithQueryRouteTimeout(requestTimeout))...)
}

// ---------------------------------------------------------------- output

var outMu sync.Mutex
var t0 = time.Now()

func stdout(line string) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintln(os.Stdout, line)
}

func stderr(tag, line string) {
	outMu.Lock()
	defer outMu.Unlock()
	t := fmt.Sprintf("%7.3f", time.Since(t0).Seconds())
	for _, l := range strings.Split(line, "\n") {
		fmt.Fprintf(os.Stderr, "[%s] %s %s\n", tag, t, l)
	}
}

// ---------------------------------------------------------------- scenarios and checks

// Failure is a scenario failure with a reason: fails every check of the scenario not yet reported.
type Failure struct{ msg string }

func (f *Failure) Error() string { return f.msg }

func failure(format string, a ...any) error { return &Failure{fmt.Sprintf(format, a...)} }

// Scenario is a body that reports one or more checks. Problems are collected per check; a check passes when the body
// reported it without problems. A check the body did not reach is failed with the body's error.
type Scenario struct {
	name     string
	checks   []string
	body     func(s *Scenario) error
	mu       sync.Mutex
	problems map[string][]string
	done     map[string]bool
	passed   map[string]bool
}

func newScenario(name string, checks []string, body func(s *Scenario) error) *Scenario {
	s := &Scenario{name: name, checks: checks, body: body, problems: map[string][]string{},
		done: map[string]bool{}, passed: map[string]bool{}}
	for _, c := range checks {
		s.problems[c] = nil
	}
	return s
}

func (s *Scenario) diag(line string) { stderr(s.name, line) }

func (s *Scenario) diagc(check, line string) { stderr(check, line) }

// problem records a problem for CHECK (it will fail; the first problem is the reason).
func (s *Scenario) problem(check, p string) {
	s.mu.Lock()
	if _, ok := s.problems[check]; !ok {
		s.mu.Unlock()
		panic("unknown check " + check)
	}
	s.problems[check] = append(s.problems[check], p)
	s.mu.Unlock()
	stderr(check, "problem: "+p)
}

// report prints CHECK's verdict now (once): PASS when no problem was recorded.
func (s *Scenario) report(check string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done[check] {
		return
	}
	s.done[check] = true
	l := s.problems[check]
	if len(l) == 0 {
		s.passed[check] = true
		stdout("PASS " + checkName(check))
		return
	}
	more := ""
	if len(l) > 1 {
		more = fmt.Sprintf(" (and %d more problems, see stderr)", len(l)-1)
	}
	stdout("FAIL " + checkName(check) + ": " + l[0] + more)
}

// failNow fails CHECK now with REASON, unless it was already reported.
func (s *Scenario) failNow(check, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done[check] {
		return
	}
	s.done[check] = true
	stderr(check, "FAIL: "+reason)
	stdout("FAIL " + checkName(check) + ": " + reason)
}

func (s *Scenario) reported(check string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[check]
}

func (s *Scenario) allPassed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.checks {
		if !s.passed[c] {
			return false
		}
	}
	return true
}

// runAll runs the scenarios concurrently (each with its own topics, groups and clients), selected by GRPC_CHECKS
// (space-separated check names; default all), then exits: status 0 when every selected check passed. A scenario
// still running after GRPC_PROGRAM_SECS (default 170 s) has its unreported checks failed.
func runAll(scenarios ...*Scenario) {
	selected := map[string]bool{}
	for _, c := range strings.Fields(env("GRPC_CHECKS", "")) {
		selected[c] = true
	}
	var run []*Scenario
	var names []string
	for _, s := range scenarios {
		want := len(selected) == 0
		for _, c := range s.checks {
			want = want || selected[c]
		}
		if want {
			run = append(run, s)
			names = append(names, s.name)
		}
	}
	if len(names) == 0 {
		names = []string{"(none)"}
	}
	stderr("main", fmt.Sprintf("client rocketmq-clients/golang %s, endpoint %s, tls %v, run id %s, scenarios %s",
		clientVersion, endpoint(), useTLS(), runID(), strings.Join(names, " ")))
	var wg sync.WaitGroup
	for _, s := range run {
		wg.Add(1)
		go func(s *Scenario) {
			defer wg.Done()
			start := time.Now()
			defer func() {
				if r := recover(); r != nil {
					s.diag(fmt.Sprintf("panic: %v\n%s", r, debug.Stack()))
					for _, c := range s.checks {
						s.failNow(c, fmt.Sprintf("unexpected panic: %v", r))
					}
				}
				s.diag(fmt.Sprintf("scenario took %d ms", time.Since(start).Milliseconds()))
			}()
			err := s.body(s)
			var f *Failure
			switch {
			case err == nil:
				for _, c := range s.checks {
					if !s.reported(c) {
						s.failNow(c, "the scenario ended without a verdict for this check (test bug)")
					}
				}
			case errors.As(err, &f):
				for _, c := range s.checks {
					s.failNow(c, f.msg)
				}
			default:
				s.diag("error: " + err.Error())
				for _, c := range s.checks {
					s.failNow(c, "unexpected error: "+err.Error())
				}
			}
		}(s)
	}
	limit, err := strconv.Atoi(env("GRPC_PROGRAM_SECS", "170"))
	if err != nil {
		limit = 170
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(time.Duration(limit) * time.Second):
		for _, s := range run {
			for _, c := range s.checks {
				s.failNow(c, fmt.Sprintf("scenario %s did not finish within %d s", s.name, limit))
			}
		}
	}
	ok := true
	for _, s := range run {
		ok = ok && s.allPassed()
	}
	os.Stdout.Sync()
	os.Stderr.Sync()
	if ok {
		os.Exit(0)
	}
	os.Exit(1)
}

// ---------------------------------------------------------------- waiting

// awaitCond waits until COND holds or LIMIT passes (polls every 50 ms, a progress note on stderr every 10 s).
func awaitCond(s *Scenario, what string, limit time.Duration, cond func() bool, progress func() string) error {
	start := time.Now()
	deadline := start.Add(limit)
	nextNote := start.Add(10 * time.Second)
	for !cond() {
		now := time.Now()
		p := ""
		if progress != nil {
			p = progress()
		}
		if !now.Before(deadline) {
			if p != "" {
				p = " (" + p + ")"
			}
			return failure("timed out after %d s waiting for %s%s", int(limit.Seconds()), what, p)
		}
		if !now.Before(nextNote) {
			if p != "" {
				p = ": " + p
			}
			s.diag(".. still waiting for " + what + p)
			nextNote = now.Add(10 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// build makes and starts a client, retrying for up to 30 s: right after mqadmin created a topic the endpoint may not
// see its route yet, and the SDK's start-up fails on a topic it cannot route.
func build[T any](s *Scenario, what string, make func() (T, error)) (T, error) {
	deadline := time.Now().Add(timeout(30))
	attempts := 0
	for {
		attempts++
		t, err := make()
		if err == nil {
			if attempts > 1 {
				s.diag(fmt.Sprintf("%s started after %d attempts", what, attempts))
			}
			return t, nil
		}
		s.diag(fmt.Sprintf("%s did not start (attempt %d): %v", what, attempts, err))
		if !time.Now().Before(deadline) {
			var zero T
			return zero, failure("could not start %s within %d s: %v", what, int(timeout(30).Seconds()), err)
		}
		time.Sleep(time.Second)
	}
}

type timeoutSetter interface{ SetRequestTimeout(time.Duration) }

func newProducer(s *Scenario, topic string, checker *rmq.TransactionChecker) (rmq.Producer, error) {
	what := "Producer(" + topic + ")"
	if checker != nil {
		what = "transactional " + what
	}
	return build(s, what, func() (rmq.Producer, error) {
		opts := []rmq.ProducerOption{rmq.WithTopics(topic), rmq.WithClientFunc(clientFunc)}
		if checker != nil {
			opts = append(opts, rmq.WithTransactionChecker(checker))
		}
		p, err := rmq.NewProducer(config(""), opts...)
		if err != nil {
			return nil, err
		}
		if err := p.Start(); err != nil {
			return nil, err
		}
		return p, nil
	})
}

// stopQuietly stops a client, waiting at most 5 s: a PushConsumer's GracefulStop waits for its long polls to end (up
// to the request timeout + the 30 s long polling); the stop is no part of any check and the program exits anyway.
func stopQuietly(s *Scenario, what string, stop func() error) {
	done := make(chan error, 1)
	go func() { done <- stop() }()
	select {
	case err := <-done:
		if err != nil {
			s.diag("stop of " + what + " failed: " + err.Error())
		}
	case <-time.After(5 * time.Second):
		s.diag("stop of " + what + " did not finish within 5 s; left behind")
	}
}

// ---------------------------------------------------------------- messages

// Sent is a message this test sent, with what it must look like when received.
type Sent struct {
	check             string
	index             int
	key               string
	tag               *string
	body              []byte
	keys              []string
	props             map[string]string
	messageGroup      *string
	deliveryTimestamp *int64 // epoch ms
	messageID         string
	sendStart         time.Time
	sendEnd           time.Time
}

func strp(s string) *string { return &s }

func newSent(check string, index int, tag string) *Sent {
	m := &Sent{check: check, index: index}
	if tag != "" {
		m.tag = strp(tag)
	}
	m.key = fmt.Sprintf("k_%s_%s_%d", check, runID(), index)
	m.keys = []string{m.key, fmt.Sprintf("alt_%d", index)}
	// A body with every byte value, of a length that varies with the index (binary-safe transport).
	n := 64 + (index*37)%1500
	b := make([]byte, n)
	head := []byte(m.key + "|")
	for i := 0; i < n; i++ {
		if i < len(head) {
			b[i] = head[i]
		} else {
			b[i] = byte((i*31 + index) & 0xff)
		}
	}
	m.body = b
	m.props = map[string]string{
		"p_check": check,
		"p_index": strconv.Itoa(index),
		"p_text":  fmt.Sprintf("caf\u00e9 \u2713 %d", index),
	}
	return m
}

func (m *Sent) build(topic string) *rmq.Message {
	msg := &rmq.Message{Topic: topic, Body: m.body}
	msg.SetKeys(m.keys...)
	if m.tag != nil {
		msg.SetTag(*m.tag)
	}
	for k, v := range m.props {
		msg.AddProperty(k, v)
	}
	if m.messageGroup != nil {
		msg.SetMessageGroup(*m.messageGroup)
	}
	if m.deliveryTimestamp != nil {
		msg.SetDelayTimestamp(time.UnixMilli(*m.deliveryTimestamp))
	}
	return msg
}

// send sends M synchronously and records its message id.
func (m *Sent) send(p rmq.Producer, topic string) error {
	m.sendStart = time.Now()
	r, err := p.Send(context.Background(), m.build(topic))
	m.sendEnd = time.Now()
	if err != nil {
		return fmt.Errorf("send of %s failed: %w", m.key, err)
	}
	if len(r) != 1 {
		return fmt.Errorf("send of %s returned %d receipts", m.key, len(r))
	}
	m.messageID = r[0].MessageID
	return nil
}

func ps(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func eqp(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// internalProperties are RocketMQ-internal message properties that Apache RocketMQ 5.3.3's proxy passes through as
// user properties: the FIFO sharding key, the transaction id, the broker's check-back counter. An endpoint may or may
// not show them; any other extra property is a difference.
var internalProperties = map[string]bool{"__SHARDINGKEY": true, "__transactionId__": true,
	"TRANSACTION_CHECK_TIMES": true}

func sortedMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func keySet(keys []string) map[string]bool {
	out := map[string]bool{}
	for _, k := range keys {
		out[k] = true
	}
	return out
}

// differences between this message and a received view (empty: identical).
func (m *Sent) differences(v *rmq.MessageView, topic string, compareID bool) []string {
	var d []string
	if v.GetTopic() != topic {
		d = append(d, fmt.Sprintf("topic %s != %s", v.GetTopic(), topic))
	}
	if !bytes.Equal(v.GetBody(), m.body) {
		d = append(d, fmt.Sprintf("body differs (%d bytes received, %d sent)", len(v.GetBody()), len(m.body)))
	}
	if !eqp(v.GetTag(), m.tag) {
		d = append(d, fmt.Sprintf("tag %s != %s", ps(v.GetTag()), ps(m.tag)))
	}
	gk, wk := keySet(v.GetKeys()), keySet(m.keys)
	same := len(gk) == len(wk)
	for k := range wk {
		same = same && gk[k]
	}
	if !same {
		d = append(d, fmt.Sprintf("keys %v != %v", v.GetKeys(), m.keys))
	}
	got := map[string]string{}
	for k, val := range v.GetProperties() {
		if !internalProperties[k] {
			got[k] = val
		}
	}
	if sortedMap(got) != sortedMap(m.props) {
		d = append(d, fmt.Sprintf("user properties %s != %s", sortedMap(v.GetProperties()), sortedMap(m.props)))
	}
	if compareID && m.messageID != "" && m.messageID != v.GetMessageId() {
		d = append(d, fmt.Sprintf("message id %s != %s (from the send receipt)", v.GetMessageId(), m.messageID))
	}
	if m.messageGroup != nil && !eqp(v.GetMessageGroup(), m.messageGroup) {
		d = append(d, fmt.Sprintf("message group %s != %s", ps(v.GetMessageGroup()), *m.messageGroup))
	}
	if m.deliveryTimestamp != nil {
		dt := v.GetDeliveryTimestamp()
		if dt == nil {
			d = append(d, fmt.Sprintf("delivery timestamp <nil> != %d", *m.deliveryTimestamp))
		} else if dt.UnixMilli() != *m.deliveryTimestamp {
			d = append(d, fmt.Sprintf("delivery timestamp %d != %d", dt.UnixMilli(), *m.deliveryTimestamp))
		}
	}
	return d
}

// keyOf is the first key of a received message (our Sent.key), or "".
func keyOf(v *rmq.MessageView) string {
	for _, k := range v.GetKeys() {
		if strings.HasPrefix(k, "k_") {
			return k
		}
	}
	return ""
}

func describe(v *rmq.MessageView) string {
	return fmt.Sprintf("id=%s key=%s tag=%s attempt=%d group=%s", v.GetMessageId(), keyOf(v), ps(v.GetTag()),
		v.GetDeliveryAttempt(), ps(v.GetMessageGroup()))
}

func byKey(list []*Sent) map[string]*Sent {
	m := map[string]*Sent{}
	for _, x := range list {
		m[x.key] = x
	}
	return m
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// ---------------------------------------------------------------- SimpleConsumer receive loop

// Arrival is one message as the receive loop got it.
type Arrival struct {
	view *rmq.MessageView
	// at is when Receive returned it.
	at time.Time
	// receiveStart is when the Receive call that returned it was issued (the message became invisible no earlier).
	receiveStart time.Time
}

// Receiver is a SimpleConsumer with a goroutine that calls Receive back to back and queues what arrives (optionally
// acking each message at once). The consumer is started (and its first receive issued) before the scenario sends.
type Receiver struct {
	s        *Scenario
	what     string
	consumer rmq.SimpleConsumer
	queue    chan *Arrival
	autoAck  bool
	batch    int32
	inv      time.Duration
	mu       sync.Mutex
	running  bool
	recvErrs int
	ackErrs  int
	lastErr  string
}

// codeMessageNotFound is MESSAGE_NOT_FOUND: the SDK returns it as an error, the other SDKs as an empty result.
const codeMessageNotFound = 40401

func newReceiver(s *Scenario, group, topic string, filter *rmq.FilterExpression, filterText string,
	inv time.Duration, autoAck bool, batch int32) (*Receiver, error) {
	r := &Receiver{s: s, what: fmt.Sprintf("SimpleConsumer(%s on %s %s)", group, topic, filterText),
		queue: make(chan *Arrival, 100000), autoAck: autoAck, batch: batch, inv: inv, running: true}
	c, err := build(s, r.what, func() (rmq.SimpleConsumer, error) {
		c, err := rmq.NewSimpleConsumer(config(group),
			rmq.WithSimpleAwaitDuration(await),
			rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: filter}),
			rmq.WithClientFuncForSimpleConsumer(clientFunc))
		if err != nil {
			return nil, err
		}
		if err := c.Start(); err != nil {
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	r.consumer = c
	go r.loop()
	return r, nil
}

func (r *Receiver) isRunning() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}

func (r *Receiver) loop() {
	for r.isRunning() {
		start := time.Now()
		got, err := r.consumer.Receive(context.Background(), r.batch, r.inv)
		if err != nil {
			var st *rmq.ErrRpcStatus
			if errors.As(err, &st) && st.GetCode() == codeMessageNotFound {
				continue
			}
			if !r.isRunning() {
				return
			}
			r.mu.Lock()
			r.recvErrs++
			r.lastErr = err.Error()
			r.mu.Unlock()
			r.s.diag(r.what + ": receive failed: " + err.Error())
			time.Sleep(200 * time.Millisecond) // back off a failing endpoint instead of spinning
			continue
		}
		t := time.Now()
		for _, v := range got {
			if r.autoAck {
				if err := r.consumer.Ack(context.Background(), v); err != nil {
					r.mu.Lock()
					r.ackErrs++
					r.lastErr = "ack: " + err.Error()
					r.mu.Unlock()
					r.s.diag(r.what + ": ack of " + describe(v) + " failed: " + err.Error())
				}
			}
			r.queue <- &Arrival{view: v, at: t, receiveStart: start}
		}
	}
}

// poll returns the next arrival, or nil once UNTIL has passed.
func (r *Receiver) poll(until time.Time) *Arrival {
	wait := time.Until(until)
	if wait <= 0 {
		select {
		case a := <-r.queue:
			return a
		default:
			return nil
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case a := <-r.queue:
		return a
	case <-timer.C:
		return nil
	}
}

// tryPoll returns an arrival if one is queued, else nil.
func (r *Receiver) tryPoll() *Arrival {
	select {
	case a := <-r.queue:
		return a
	default:
		return nil
	}
}

func (r *Receiver) errors() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := fmt.Sprintf("receive errors %d, ack errors %d", r.recvErrs, r.ackErrs)
	if r.lastErr != "" {
		e += ", last: " + r.lastErr
	}
	return e
}

func (r *Receiver) close() {
	r.mu.Lock()
	r.running = false
	r.mu.Unlock()
	stopQuietly(r.s, r.what, r.consumer.GracefulStop)
}

// receiveAll receives until every message of EXPECT (by key) has arrived once, checking each arrival's content;
// duplicates and unknown messages are problems of CHECK. Returns the first arrival of each key.
func receiveAll(s *Scenario, check string, r *Receiver, topic string, expect map[string]*Sent, order []string,
	limit time.Duration) map[string]*Arrival {
	first := map[string]*Arrival{}
	deadline := time.Now().Add(limit)
	for len(first) < len(expect) {
		a := r.poll(deadline)
		if a == nil {
			var missing []string
			for _, k := range order {
				if first[k] == nil && len(missing) < 5 {
					missing = append(missing, k)
				}
			}
			s.problem(check, fmt.Sprintf("received %d of %d messages within %d s; missing e.g. %v; %s",
				len(first), len(expect), int(limit.Seconds()), missing, r.errors()))
			return first
		}
		checkArrival(s, check, a, topic, expect, first)
	}
	return first
}

func checkArrival(s *Scenario, check string, a *Arrival, topic string, expect map[string]*Sent,
	first map[string]*Arrival) {
	k := keyOf(a.view)
	sent := expect[k]
	if sent == nil {
		s.problem(check, "received a message that was not sent to this topic: "+describe(a.view))
		return
	}
	if first[k] != nil {
		s.problem(check, fmt.Sprintf("received %s twice (%s)", k, describe(a.view)))
		return
	}
	first[k] = a
	if d := sent.differences(a.view, topic, true); len(d) > 0 {
		s.problem(check, k+" arrived different from what was sent: "+strings.Join(d, "; "))
	}
	if a.view.GetDeliveryAttempt() != 1 {
		s.problem(check, fmt.Sprintf("%s arrived with deliveryAttempt %d, expected 1", k, a.view.GetDeliveryAttempt()))
	}
}

// ---------------------------------------------------------------- resources (created by grpc.sh with mqadmin)

func topicName(key string) string { return "grpc_" + key + "_" + runID() }

func groupName(key string) string { return "grpcg_" + key + "_" + runID() }

func dlqTopic(groupKey string) string { return "%DLQ%" + groupName(groupKey) }

// retryMaxTimes of the retry/DLQ group (grpc-java's Resources.RETRY_MAX_TIMES): attempts 1, 2, 3, then the DLQ.
const retryMaxTimes = 2
