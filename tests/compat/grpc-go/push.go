// PushConsumer checks (grpc-java's PushConsumers.java):
//
//	push-success             50 messages, the listener returns SUCCESS: each consumed once (attempt 1), identical
//	push-failure-redelivery  a group with retryMaxTimes 2 (mqadmin updateSubGroup -r 2): the listener returns FAILURE
//	                         for 3 of 8 messages every time; those are redelivered with deliveryAttempt 1, 2, 3
//	                         (never more); the other 5 are consumed once
//	push-dlq                 the 3 then land in %DLQ%group (read by a SimpleConsumer of another group) with their
//	                         body, tag, keys, user properties and message id; none of the 5 do
package main

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
)

const (
	successCount = 50
	failCount    = 3
	okCount      = 5
	maxAttempts  = retryMaxTimes + 1
)

func pushConsumersMain() {
	runAll(
		newScenario("push-success", []string{"push-success"}, pushSuccess),
		newScenario("push-retry-dlq", []string{"push-failure-redelivery", "push-dlq"}, pushRetryDlq),
	)
}

type delivery struct {
	view *rmq.MessageView
	at   time.Time
}

// deliveries records what a listener consumed, per message key.
type deliveries struct {
	mu  sync.Mutex
	got map[string][]delivery
}

func (d *deliveries) add(v *rmq.MessageView) {
	k := keyOf(v)
	if k == "" {
		k = "?"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got[k] = append(d.got[k], delivery{v, time.Now()})
}

func (d *deliveries) get(k string) []delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]delivery(nil), d.got[k]...)
}

func (d *deliveries) snapshot() map[string][]delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]delivery{}
	for k, v := range d.got {
		out[k] = append([]delivery(nil), v...)
	}
	return out
}

// newPushConsumer builds and starts a PushConsumer with 4 consumption threads and a 10 s request timeout.
func newPushConsumer(s *Scenario, group, topic string, fifoAccelerator bool,
	listener func(*rmq.MessageView) rmq.ConsumerResult) (rmq.PushConsumer, error) {
	what := fmt.Sprintf("PushConsumer(%s on %s)", group, topic)
	return build(s, what, func() (rmq.PushConsumer, error) {
		opts := []rmq.PushConsumerOption{
			rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
			rmq.WithPushConsumptionThreadCount(4),
			rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: listener}),
		}
		if fifoAccelerator {
			opts = append(opts, rmq.WithPushEnableFifoConsumeAccelerator(true))
		}
		c, err := rmq.NewPushConsumer(config(group), opts...)
		if err != nil {
			return nil, err
		}
		// The push consumer takes no client options; its request timeout is set like this (default 3 s).
		if ts, ok := c.(timeoutSetter); ok {
			ts.SetRequestTimeout(requestTimeout)
		}
		if err := c.Start(); err != nil {
			return nil, err
		}
		return c, nil
	})
}

func attempts(ds []delivery) []int {
	var out []int
	for _, d := range ds {
		out = append(out, int(d.view.GetDeliveryAttempt()))
	}
	return out
}

func pushSuccess(s *Scenario) error {
	check := "push-success"
	topic := topicName("push")
	got := &deliveries{got: map[string][]delivery{}}
	c, err := newPushConsumer(s, groupName("push"), topic, false, func(v *rmq.MessageView) rmq.ConsumerResult {
		got.add(v)
		return rmq.SUCCESS
	})
	if err != nil {
		return err
	}
	defer stopQuietly(s, "PushConsumer", c.GracefulStop)
	p, err := newProducer(s, topic, nil)
	if err != nil {
		return err
	}
	defer stopQuietly(s, "Producer", p.GracefulStop)
	sent := map[string]*Sent{}
	for i := 0; i < successCount; i++ {
		tag := "TagB"
		if i%2 == 0 {
			tag = "TagA"
		}
		m := newSent(check, i, tag)
		if err := m.send(p, topic); err != nil {
			return failure("%v", err)
		}
		sent[m.key] = m
	}
	if err := awaitCond(s, "every message consumed", timeout(60), func() bool {
		snap := got.snapshot()
		for k := range sent {
			if len(snap[k]) == 0 {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("%d of %d consumed", len(got.snapshot()), len(sent)) }); err != nil {
		s.problem(check, err.Error())
	}
	for k, ds := range got.snapshot() {
		m := sent[k]
		if m == nil {
			s.problem(check, "consumed a message that was not sent: "+describe(ds[0].view))
			continue
		}
		if len(ds) > 1 {
			s.problem(check, fmt.Sprintf("%s was consumed %d times although the listener returned SUCCESS (attempts %v)",
				m.key, len(ds), attempts(ds)))
		}
		if d := m.differences(ds[0].view, topic, true); len(d) > 0 {
			s.problem(check, m.key+" arrived different from what was sent: "+strings.Join(d, "; "))
		}
		if ds[0].view.GetDeliveryAttempt() != 1 {
			s.problem(check, fmt.Sprintf("%s arrived with deliveryAttempt %d", m.key, ds[0].view.GetDeliveryAttempt()))
		}
	}
	s.report(check)
	return nil
}

func pushRetryDlq(s *Scenario) error {
	redo := "push-failure-redelivery"
	dlq := "push-dlq"
	topic := topicName("retry")
	group := groupName("retry")
	dlqT := dlqTopic("retry")
	got := &deliveries{got: map[string][]delivery{}}
	// The DLQ reader subscribes first (its topic exists: grpc.sh created it).
	dlqReader, err := newReceiver(s, groupName("dlq"), dlqT, rmq.SUB_ALL, "*", invisible, true, 32)
	if err != nil {
		return err
	}
	defer dlqReader.close()
	c, err := newPushConsumer(s, group, topic, false, func(v *rmq.MessageView) rmq.ConsumerResult {
		got.add(v)
		s.diagc(redo, "consumed "+describe(v))
		if ps(v.GetTag()) == "fail" {
			return rmq.FAILURE
		}
		return rmq.SUCCESS
	})
	if err != nil {
		return err
	}
	defer stopQuietly(s, "PushConsumer", c.GracefulStop)
	p, err := newProducer(s, topic, nil)
	if err != nil {
		return err
	}
	defer stopQuietly(s, "Producer", p.GracefulStop)
	fail := map[string]*Sent{}
	ok := map[string]*Sent{}
	var all []*Sent
	for i := 0; i < failCount+okCount; i++ {
		f := i%3 == 0 && len(fail) < failCount
		tag := "ok"
		if f {
			tag = "fail"
		}
		m := newSent(redo, i, tag)
		if err := m.send(p, topic); err != nil {
			return failure("%v", err)
		}
		if f {
			fail[m.key] = m
		} else {
			ok[m.key] = m
		}
		all = append(all, m)
	}
	sentAt := time.Now()
	summary := func() string {
		var b []string
		for _, m := range all {
			b = append(b, fmt.Sprintf("%s#%d=%d", ps(m.tag), m.index, len(got.get(m.key))))
		}
		return strings.Join(b, " ")
	}

	// Redelivery: every failing message reaches attempt maxAttempts.
	if err := awaitCond(s, fmt.Sprintf("each failing message delivered %d times", maxAttempts), timeout(90), func() bool {
		for k := range fail {
			if len(got.get(k)) < maxAttempts {
				return false
			}
		}
		for k := range ok {
			if len(got.get(k)) == 0 {
				return false
			}
		}
		return true
	}, func() string { return "deliveries " + summary() }); err != nil {
		s.problem(redo, err.Error())
	}

	// Dead-letter queue: the failing messages, each once, as they were sent.
	inDlq := map[string]*Arrival{}
	deadline := time.Now().Add(timeout(60))
	quietUntil := forever
	for {
		now := time.Now()
		if quietUntil == forever {
			all := true
			for k := range fail {
				all = all && inDlq[k] != nil
			}
			if all {
				quietUntil = now.Add(3 * time.Second)
			}
		}
		until := minTime(deadline, quietUntil)
		if !now.Before(until) {
			break
		}
		a := dlqReader.poll(until)
		if a == nil {
			continue
		}
		k := keyOf(a.view)
		if ok[k] != nil {
			s.problem(dlq, fmt.Sprintf("message %s, consumed with SUCCESS, is in %s", k, dlqT))
			continue
		}
		m := fail[k]
		if m == nil {
			s.problem(dlq, fmt.Sprintf("unexpected message in %s: %s", dlqT, describe(a.view)))
			continue
		}
		if inDlq[k] != nil {
			s.problem(dlq, fmt.Sprintf("%s is in %s twice", k, dlqT))
			continue
		}
		inDlq[k] = a
		ds := got.get(k)
		last := sentAt
		if len(ds) > 0 {
			last = ds[len(ds)-1].at
		}
		s.diagc(dlq, fmt.Sprintf("%s read from %s %d ms after its last delivery (%s, properties %s)",
			k, dlqT, ms(a.at.Sub(last)), describe(a.view), sortedMap(a.view.GetProperties())))
		if d := m.differences(a.view, dlqT, true); len(d) > 0 {
			s.problem(dlq, fmt.Sprintf("%s in %s differs from what was sent: %s", k, dlqT, strings.Join(d, "; ")))
		}
	}
	for _, m := range all {
		if fail[m.key] != nil && inDlq[m.key] == nil {
			s.problem(dlq, fmt.Sprintf("%s (FAILURE on every attempt) did not reach %s within %d s of its last attempt; %s",
				m.key, dlqT, int(timeout(60).Seconds()), dlqReader.errors()))
		}
	}

	// Redelivery verdict, now that the DLQ wait gave extra attempts a chance to show up.
	for _, m := range all {
		ds := got.get(m.key)
		if len(ds) == 0 {
			s.problem(redo, fmt.Sprintf("%s (%s) was never consumed", m.key, ps(m.tag)))
			continue
		}
		if d := m.differences(ds[0].view, topic, true); len(d) > 0 {
			s.problem(redo, m.key+" arrived different from what was sent: "+strings.Join(d, "; "))
		}
		att := attempts(ds)
		if fail[m.key] != nil {
			var want []int
			for i := 1; i <= maxAttempts; i++ {
				want = append(want, i)
			}
			if !reflect.DeepEqual(att, want) {
				s.problem(redo, fmt.Sprintf("%s (FAILURE every time) was delivered with attempts %v, expected %v "+
					"(retryMaxTimes %d)", m.key, att, want, retryMaxTimes))
			}
			var gaps []int64
			for i := 1; i < len(ds); i++ {
				gaps = append(gaps, ms(ds[i].at.Sub(ds[i-1].at)))
			}
			s.diagc(redo, fmt.Sprintf("%s: attempts %v, ms between deliveries %v", m.key, att, gaps))
		} else if !reflect.DeepEqual(att, []int{1}) {
			s.problem(redo, fmt.Sprintf("%s (SUCCESS) was delivered with attempts %v, expected [1]", m.key, att))
		}
	}
	s.report(redo)
	s.report(dlq)
	return nil
}
