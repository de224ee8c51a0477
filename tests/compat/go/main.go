// Command compat-go checks Conveyor against the Apache RocketMQ Go client (rocketmq-client-go v2).
//
// Scenarios (-scenario):
//   send-receive (default): a producer sends N messages (40% SendSync, 40% SendAsync, 20% SendOneWay) with two
//     keys, a tag and user properties; a clustering push consumer must receive every message with identical body,
//     keys, tags and properties (duplicates allowed).
//   e-tag-filter, g-retry-dlq, h-delay-levels, l-broadcast: see scenarios.go.
//
// Output contract: prints "PASS <name>" and exits 0, or diagnostics followed by "FAIL <name>: reason" and
// exits 1. The name server address comes from NAMESRV_ADDR.
//
// The Go push consumer refuses to start for a topic without a route, so the topic should exist: pass it with
// -topic (run.sh creates it first). Without -topic a fresh name is used and the broker must auto-create it
// on the first send (send-receive only).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

const clientModule = "github.com/apache/rocketmq-client-go/v2"

// failure is a scenario failure; its message is the reason on the FAIL line.
type failure struct{ msg string }

func (f failure) Error() string { return f.msg }

func failf(format string, args ...interface{}) error { return failure{fmt.Sprintf(format, args...)} }

// expected is one sent message, kept for comparison with what the consumer receives.
type expected struct {
	index    int
	key      string
	keys     []string
	tag      string
	body     []byte
	props    map[string]string
	uniqID   string
	sendInfo string
}

var tags = []string{"TagA", "TagB", "TagC"}

func newExpected(runID string, index int) *expected {
	e := &expected{
		index: index,
		key:   fmt.Sprintf("k_%s_%d", runID, index),
		tag:   tags[index%len(tags)],
		props: map[string]string{
			"compat_idx":  strconv.Itoa(index),
			"compat_run":  runID,
			"compat_text": fmt.Sprintf("h\u00e9llo w\u00f6rld \u2713 a=b; c:d #%d", index),
		},
		sendInfo: "not sent",
	}
	e.keys = []string{e.key, "all_" + runID}
	head := fmt.Sprintf("conveyor-compat %s #%d ", runID, index)
	if index%500 == 7 {
		// Large and compressible: the Go producer zlib-compresses bodies over 4 KiB.
		var b strings.Builder
		b.WriteString(head)
		for b.Len() < 6000+index%100 {
			fmt.Fprintf(&b, "the quick brown fox %d ", index)
		}
		e.body = []byte(b.String())
	} else {
		e.body = make([]byte, len(head)+16+(index*37)%300)
		rand.New(rand.NewSource(int64(index))).Read(e.body)
		copy(e.body, head)
	}
	return e
}

func (e *expected) message(topic string) *primitive.Message {
	m := primitive.NewMessage(topic, e.body)
	m.WithTag(e.tag)
	m.WithKeys(e.keys)
	for k, v := range e.props {
		m.WithProperty(k, v)
	}
	return m
}

// compare returns "" when got is identical to what was sent, otherwise the differences.
func (e *expected) compare(topic string, got *primitive.MessageExt) string {
	var d []string
	if got.Topic != topic {
		d = append(d, "topic="+got.Topic)
	}
	if !bytes.Equal(got.Body, e.body) {
		d = append(d, fmt.Sprintf("body differs (sent %d bytes, got %d)", len(e.body), len(got.Body)))
	}
	if want := strings.Join(e.keys, primitive.PropertyKeySeparator); got.GetKeys() != want {
		d = append(d, fmt.Sprintf("keys=%q", got.GetKeys()))
	}
	if got.GetTags() != e.tag {
		d = append(d, fmt.Sprintf("tags=%q", got.GetTags()))
	}
	for k, v := range e.props {
		if g := got.GetProperty(k); g != v {
			d = append(d, fmt.Sprintf("property %s=%q (sent %q)", k, g, v))
		}
	}
	if g := got.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex); e.uniqID != "" && g != e.uniqID {
		d = append(d, fmt.Sprintf("UNIQ_KEY=%q (sent %s)", g, e.uniqID))
	}
	if len(d) == 0 {
		return ""
	}
	return e.key + ": " + strings.Join(d, ", ")
}

// collector records what the consumer received.
type collector struct {
	mu         sync.Mutex
	expected   map[string]*expected
	received   map[string]int
	perQueue   map[int]int
	deliveries int
	problems   []string
	unexpected []string
	nProblems  int
	nUnexp     int
}

func newCollector(msgs []*expected) *collector {
	c := &collector{expected: map[string]*expected{}, received: map[string]int{}, perQueue: map[int]int{}}
	for _, e := range msgs {
		c.expected[e.key] = e
	}
	return c
}

func (c *collector) accept(topic string, m *primitive.MessageExt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deliveries++
	if m.Queue != nil {
		c.perQueue[m.Queue.QueueId]++
	}
	first := strings.SplitN(m.GetKeys(), primitive.PropertyKeySeparator, 2)[0]
	e, ok := c.expected[first]
	if !ok {
		c.nUnexp++
		if len(c.unexpected) < 10 {
			c.unexpected = append(c.unexpected, fmt.Sprintf("keys=%q tags=%q msgId=%s queueOffset=%d",
				m.GetKeys(), m.GetTags(), m.MsgId, m.QueueOffset))
		}
		return
	}
	if diff := e.compare(topic, m); diff != "" {
		c.nProblems++
		if len(c.problems) < 10 {
			c.problems = append(c.problems, fmt.Sprintf("%s (queueOffset=%d)", diff, m.QueueOffset))
		}
	}
	c.received[first]++
}

// sent records the producer-assigned unique id and a send summary (guarded: consumers read them).
func (c *collector) sent(e *expected, m *primitive.Message, info string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.uniqID = m.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex)
	e.sendInfo = info
}

func (c *collector) complete() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.received) == len(c.expected)
}

func (c *collector) progress() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d/%d distinct received, %d deliveries", len(c.received), len(c.expected), c.deliveries)
}

func (c *collector) report() []string {
	p := c.progress()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []string{fmt.Sprintf("received %s, %d mismatched, %d unexpected", p, c.nProblems, c.nUnexp),
		fmt.Sprintf("deliveries per queue: %v", c.perQueue)}
	var missing []string
	for _, e := range c.expected {
		if c.received[e.key] == 0 {
			missing = append(missing, e.key+" ["+e.sendInfo+"]")
		}
	}
	sort.Strings(missing)
	if len(missing) > 10 {
		missing = missing[:10]
	}
	if len(missing) > 0 {
		out = append(out, "missing (first 10): "+strings.Join(missing, "; "))
	}
	for _, s := range c.problems {
		out = append(out, "mismatch: "+s)
	}
	for _, s := range c.unexpected {
		out = append(out, "unexpected: "+s)
	}
	return out
}

func clientVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == clientModule {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func timeout(defaultSecs int) time.Duration {
	if s := os.Getenv("COMPAT_TIMEOUT_SECS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return time.Duration(n) * time.Second
		}
	}
	return time.Duration(defaultSecs) * time.Second
}

// await polls cond every 100 ms until it holds or the timeout passes; notes progress on stderr every 10 s.
func await(what string, limit time.Duration, cond func() bool, progress func() string) error {
	deadline := time.Now().Add(limit)
	nextNote := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return failf("timed out after %s waiting for %s (%s)", limit, what, progress())
		}
		if time.Now().After(nextNote) {
			fmt.Fprintf(os.Stderr, "  .. still waiting for %s: %s\n", what, progress())
			nextNote = time.Now().Add(10 * time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

func main() {
	scenario := flag.String("scenario", "send-receive", "send-receive | e-tag-filter | g-retry-dlq | h-delay-levels | l-broadcast")
	total := flag.Int("n", 0, "number of messages (default: per scenario)")
	topicFlag := flag.String("topic", os.Getenv("COMPAT_TOPIC"), "existing topic to use (default: a new name, auto-created by the broker)")
	flag.Parse()

	logLevel := os.Getenv("COMPAT_GO_LOG_LEVEL")
	if logLevel == "" {
		logLevel = "error"
	}
	rlog.SetLogLevel(logLevel)

	name := "go-" + clientVersion() + "/" + *scenario
	var diag []func() []string
	var err error
	switch *scenario {
	case "send-receive":
		n := *total
		if n == 0 {
			n = 10000
		}
		err = run(n, *topicFlag, &diag)
	case "e-tag-filter":
		n := *total
		if n == 0 {
			n = 300
		}
		err = runTagFilter(n, *topicFlag, &diag)
	case "g-retry-dlq":
		err = runRetryDLQ(*topicFlag, &diag)
	case "h-delay-levels":
		err = runDelayLevels(*topicFlag, &diag)
	case "l-broadcast":
		n := *total
		if n == 0 {
			n = 1000
		}
		err = runBroadcast(n, *topicFlag, &diag)
	default:
		err = failf("unknown scenario %q", *scenario)
	}
	if err == nil {
		fmt.Println("PASS " + name)
		os.Exit(0)
	}
	for _, d := range diag {
		for _, line := range d() {
			fmt.Println("  # " + line)
		}
	}
	fmt.Printf("FAIL %s: %v\n", name, err)
	os.Exit(1)
}

func run(total int, topic string, diag *[]func() []string) error {
	addr := strings.TrimSpace(os.Getenv("NAMESRV_ADDR"))
	if addr == "" {
		return failf("NAMESRV_ADDR is not set")
	}
	nameservers := strings.Split(addr, ";")
	runID := strconv.FormatInt(time.Now().UnixMilli(), 36) + strconv.FormatInt(rand.Int63n(1<<20), 36)
	if topic == "" {
		topic = "compat_t_go_" + runID
	}
	group := "compat_g_go_" + runID
	*diag = append(*diag, func() []string { return []string{"topic=" + topic + " group=" + group} })

	msgs := make([]*expected, total)
	for i := range msgs {
		msgs[i] = newExpected(runID, i)
	}
	col := newCollector(msgs)
	*diag = append(*diag, col.report)

	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(nameservers)),
		producer.WithGroupName(group+"_p"),
		producer.WithInstanceName("p-"+runID),
		producer.WithSendMsgTimeout(10*time.Second),
		producer.WithRetry(2),
	)
	if err != nil {
		return failf("NewProducer: %v", err)
	}
	if err := p.Start(); err != nil {
		return failf("producer Start: %v", err)
	}
	defer p.Shutdown()

	ctx := context.Background()
	nSync, nAsync := total*2/5, total*2/5
	start := time.Now()

	// 1. Synchronous sends. The first one also makes the topic exist when it is auto-created.
	for _, e := range msgs[:nSync] {
		m := e.message(topic)
		r, err := p.SendSync(ctx, m)
		if err != nil {
			return failf("SendSync %s: %v", e.key, err)
		}
		if r.Status != primitive.SendOK {
			return failf("SendSync %s: status %v", e.key, r.Status)
		}
		col.sent(e, m, fmt.Sprintf("sync queue=%d offset=%d msgId=%s", r.MessageQueue.QueueId, r.QueueOffset, r.MsgID))
	}

	// 2. The consumer starts while the remaining messages are still being sent.
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver(nameservers)),
		consumer.WithGroupName(group),
		consumer.WithInstance("c-"+runID),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		return failf("NewPushConsumer: %v", err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range ms {
			col.accept(topic, m)
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return failf("Subscribe: %v", err)
	}
	if err := c.Start(); err != nil {
		return failf("consumer Start: %v", err)
	}
	defer c.Shutdown()

	// 3. Asynchronous sends, at most 256 in flight.
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var asyncErrs []string
	inFlight := make(chan struct{}, 256)
	for _, e := range msgs[nSync : nSync+nAsync] {
		e := e
		m := e.message(topic)
		inFlight <- struct{}{}
		wg.Add(1)
		err := p.SendAsync(ctx, func(ctx context.Context, r *primitive.SendResult, err error) {
			defer func() { <-inFlight; wg.Done() }()
			errMu.Lock()
			defer errMu.Unlock()
			if err != nil {
				asyncErrs = append(asyncErrs, fmt.Sprintf("%s: %v", e.key, err))
				return
			}
			if r.Status != primitive.SendOK {
				asyncErrs = append(asyncErrs, fmt.Sprintf("%s: status %v", e.key, r.Status))
			}
			col.sent(e, m, fmt.Sprintf("async queue=%d offset=%d msgId=%s", r.MessageQueue.QueueId, r.QueueOffset, r.MsgID))
		}, m)
		if err != nil {
			<-inFlight
			wg.Done()
			return failf("SendAsync %s: %v", e.key, err)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout(120)):
		return failf("SendAsync: callbacks missing after %s", timeout(120))
	}
	if len(asyncErrs) > 0 {
		return failf("%d async sends failed, e.g. %s", len(asyncErrs), asyncErrs[0])
	}

	// 4. One-way sends.
	for _, e := range msgs[nSync+nAsync:] {
		m := e.message(topic)
		if err := p.SendOneWay(ctx, m); err != nil {
			return failf("SendOneWay %s: %v", e.key, err)
		}
		col.sent(e, m, "oneway")
	}
	fmt.Fprintf(os.Stderr, "  .. sent %d messages in %s\n", total, time.Since(start).Round(time.Millisecond))

	if err := await("every message to be consumed", timeout(180), col.complete, col.progress); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "  .. consumed %s %s after the first send\n", col.progress(), time.Since(start).Round(time.Millisecond))
	col.mu.Lock()
	defer col.mu.Unlock()
	if col.nProblems > 0 {
		return failf("%d received messages differ from what was sent, e.g. %s", col.nProblems, col.problems[0])
	}
	if col.nUnexp > 0 {
		return failf("%d unexpected messages received, e.g. %s", col.nUnexp, col.unexpected[0])
	}
	return nil
}
