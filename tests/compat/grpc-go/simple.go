// SimpleConsumer checks (grpc-java's SimpleConsumers.java; receive with a 10 s invisible duration, the minimum):
//
//	simple-ack       a received and acked message does not come back within 2 x the invisible duration of the ack
//	simple-redeliver a received message that is not acked comes back after the invisible duration (never before the
//	                 receive call + 10 s, at most 12 s after that), with deliveryAttempt 2 (1 the first time)
//	simple-change-invisible-extend
//	                 ChangeInvisibleDuration(20 s) right after the receive: not redelivered at the old deadline
//	                 (receive + 10 s) nor before the change + 20 s; redelivered after it (attempt 2) and acked
//	simple-change-invisible-ack
//	                 ChangeInvisibleDuration(20 s), then, past the old deadline (receive + 13 s), ack with the handle
//	                 the change returned (the SDK keeps it in the MessageView): the ack succeeds and the message
//	                 never comes back (watched until the new deadline + 12 s)
//	simple-tag-filter
//	                 FilterExpression "TagA||TagB" gets exactly the TagA and TagB messages (a second group with
//	                 "TagC" gets exactly the TagC ones); watched for 6 s after the last expected one
package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
)

// lateMs is how late a redelivery may be, after the invisible duration ran out.
const lateMs = 12000

const extended = 20 * time.Second

func simpleConsumersMain() {
	runAll(
		newScenario("ack-redeliver", []string{"simple-ack", "simple-redeliver"}, ackRedeliver),
		newScenario("change-invisible", []string{"simple-change-invisible-extend", "simple-change-invisible-ack"},
			changeInvisible),
		newScenario("tag-filter", []string{"simple-tag-filter"}, tagFilter),
	)
}

func sendN(p rmq.Producer, topic, check, tag string, from, n int) ([]*Sent, error) {
	var out []*Sent
	for i := from; i < from+n; i++ {
		m := newSent(check, i, tag)
		if err := m.send(p, topic); err != nil {
			return nil, failure("%v", err)
		}
		out = append(out, m)
	}
	return out, nil
}

// track is one message's deliveries so far.
type track struct {
	sent        *Sent
	check       string
	deliveries  []*Arrival
	ackedAt     time.Time
	changeStart time.Time
	changeEnd   time.Time
	done        bool
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// forever stands for "no time set" in deadline arithmetic.
var forever = time.Now().Add(100 * 365 * 24 * time.Hour)

func ackRedeliver(s *Scenario) error {
	topic := topicName("simple")
	r, err := newReceiver(s, groupName("simple"), topic, rmq.SUB_ALL, "*", invisible, false, 16)
	if err != nil {
		return err
	}
	defer r.close()
	p, err := newProducer(s, topic, nil)
	if err != nil {
		return err
	}
	defer stopQuietly(s, "Producer", p.GracefulStop)
	tracks := map[string]*track{}
	var order []*track
	acks, err := sendN(p, topic, "simple-ack", "ack", 0, 4)
	if err != nil {
		return err
	}
	holds, err := sendN(p, topic, "simple-redeliver", "hold", 4, 4)
	if err != nil {
		return err
	}
	for _, m := range append(acks, holds...) {
		t := &track{sent: m, check: m.check}
		tracks[m.key] = t
		order = append(order, t)
	}
	sentAt := time.Now()
	// Ends when every "hold" message came back and was acked, and 2 x INV passed since the last ack of an "ack"
	// message; or at the deadline.
	deadline := sentAt.Add(timeout(20) + invisible + lateMs*time.Millisecond)
	for {
		now := time.Now()
		var lastAck time.Time
		allAcked, allRedelivered := true, true
		for _, t := range order {
			if t.check == "simple-ack" {
				allAcked = allAcked && !t.ackedAt.IsZero()
				lastAck = maxTime(lastAck, t.ackedAt)
			} else {
				allRedelivered = allRedelivered && t.done
			}
		}
		// The watch over the acked messages ends 2 x INV after the last ack.
		watchEnd := forever
		if allAcked {
			watchEnd = lastAck.Add(2 * invisible)
		}
		if allAcked && allRedelivered && !now.Before(watchEnd) {
			break
		}
		end := deadline
		if allAcked {
			end = maxTime(deadline, watchEnd)
		}
		if !now.Before(end) {
			break
		}
		until := end
		if allAcked && allRedelivered {
			until = watchEnd
		}
		a := r.poll(until)
		if a == nil {
			continue
		}
		t := tracks[keyOf(a.view)]
		if t == nil {
			s.problem("simple-ack", "received a message that was not sent: "+describe(a.view))
			continue
		}
		t.deliveries = append(t.deliveries, a)
		n := len(t.deliveries)
		if n == 1 {
			if d := t.sent.differences(a.view, topic, true); len(d) > 0 {
				s.problem(t.check, t.sent.key+" arrived different from what was sent: "+strings.Join(d, "; "))
			}
			if a.view.GetDeliveryAttempt() != 1 {
				s.problem(t.check, fmt.Sprintf("%s first arrived with deliveryAttempt %d", t.sent.key,
					a.view.GetDeliveryAttempt()))
			}
			if t.check == "simple-ack" {
				err := r.consumer.Ack(context.Background(), a.view)
				t.ackedAt = time.Now()
				if err != nil {
					s.problem("simple-ack", fmt.Sprintf("ack of %s failed: %v", t.sent.key, err))
				}
			}
			continue
		}
		if t.check == "simple-ack" {
			s.problem("simple-ack", fmt.Sprintf("acked message %s came back %d ms after the ack (%s)",
				t.sent.key, ms(a.at.Sub(t.ackedAt)), describe(a.view)))
			continue
		}
		first := t.deliveries[0]
		if n == 2 {
			early := first.receiveStart.Add(invisible)
			late := first.at.Add(invisible + lateMs*time.Millisecond)
			s.diagc("simple-redeliver", fmt.Sprintf("%s redelivered %d ms after the first delivery, attempt %d",
				t.sent.key, ms(a.at.Sub(first.at)), a.view.GetDeliveryAttempt()))
			if a.at.Before(early) {
				s.problem("simple-redeliver", fmt.Sprintf("%s came back %d ms after the receive call, before its "+
					"invisible duration (%d ms) ran out", t.sent.key, ms(a.at.Sub(first.receiveStart)), ms(invisible)))
			} else if a.at.After(late) {
				s.problem("simple-redeliver", fmt.Sprintf("%s came back %d ms after the first delivery (allowed: %d ms)",
					t.sent.key, ms(a.at.Sub(first.at)), ms(invisible)+lateMs))
			}
			if a.view.GetDeliveryAttempt() != 2 {
				s.problem("simple-redeliver", fmt.Sprintf("%s came back with deliveryAttempt %d, expected 2",
					t.sent.key, a.view.GetDeliveryAttempt()))
			}
			if a.view.GetMessageId() != first.view.GetMessageId() {
				s.problem("simple-redeliver", fmt.Sprintf("%s came back with message id %s, first delivered as %s",
					t.sent.key, a.view.GetMessageId(), first.view.GetMessageId()))
			}
			if err := r.consumer.Ack(context.Background(), a.view); err != nil {
				s.problem("simple-redeliver", fmt.Sprintf("ack of the redelivered %s failed: %v", t.sent.key, err))
			}
			t.done = true
			continue
		}
		s.problem("simple-redeliver", fmt.Sprintf("%s came back a third time, after its redelivery was acked (%s)",
			t.sent.key, describe(a.view)))
	}
	for _, t := range order {
		if len(t.deliveries) == 0 {
			s.problem(t.check, t.sent.key+" was never received; "+r.errors())
		} else if t.check == "simple-redeliver" && !t.done {
			s.problem(t.check, fmt.Sprintf("%s (not acked) did not come back within %d ms of its first delivery",
				t.sent.key, ms(invisible)+lateMs))
		}
	}
	s.report("simple-ack")
	s.report("simple-redeliver")
	return nil
}

func changeInvisible(s *Scenario) error {
	ext := "simple-change-invisible-extend"
	ack := "simple-change-invisible-ack"
	topic := topicName("inv")
	r, err := newReceiver(s, groupName("inv"), topic, rmq.SUB_ALL, "*", invisible, false, 16)
	if err != nil {
		return err
	}
	defer r.close()
	p, err := newProducer(s, topic, nil)
	if err != nil {
		return err
	}
	defer stopQuietly(s, "Producer", p.GracefulStop)
	tracks := map[string]*track{}
	var order []*track
	exts, err := sendN(p, topic, ext, "extend", 0, 2)
	if err != nil {
		return err
	}
	acks, err := sendN(p, topic, ack, "ackafter", 2, 2)
	if err != nil {
		return err
	}
	for _, m := range append(exts, acks...) {
		t := &track{sent: m, check: m.check}
		tracks[m.key] = t
		order = append(order, t)
	}
	sentAt := time.Now()
	deadline := sentAt.Add(timeout(20) + extended + lateMs*time.Millisecond)
	for {
		now := time.Now()
		// Next time-driven action: an "ackafter" message to ack past its old deadline, or the end of the watch over
		// its new one.
		next := deadline
		finished := true
		for _, t := range order {
			if len(t.deliveries) == 0 {
				finished = false
				continue
			}
			first := t.deliveries[0]
			if t.check == ack {
				ackAt := first.receiveStart.Add(invisible + 3*time.Second)
				if t.ackedAt.IsZero() && !t.changeEnd.IsZero() {
					if !now.Before(ackAt) {
						if err := r.consumer.Ack(context.Background(), first.view); err != nil {
							s.problem(ack, fmt.Sprintf("ack of %s past its old deadline, with the handle "+
								"ChangeInvisibleDuration returned, failed: %v", t.sent.key, err))
						} else {
							s.diagc(ack, fmt.Sprintf("%s acked %d ms after its receive, with the handle from "+
								"ChangeInvisibleDuration", t.sent.key, ms(time.Since(first.at))))
						}
						t.ackedAt = time.Now()
					} else {
						next = minTime(next, ackAt)
					}
				}
				watchEnd := t.changeEnd.Add(extended + lateMs*time.Millisecond)
				if t.ackedAt.IsZero() || now.Before(watchEnd) {
					finished = false
					if !t.ackedAt.IsZero() {
						next = minTime(next, watchEnd)
					}
				}
			} else if !t.done {
				finished = false
			}
		}
		if finished || !now.Before(deadline) {
			break
		}
		a := r.poll(next)
		if a == nil {
			continue
		}
		t := tracks[keyOf(a.view)]
		if t == nil {
			s.problem(ext, "received a message that was not sent: "+describe(a.view))
			continue
		}
		t.deliveries = append(t.deliveries, a)
		n := len(t.deliveries)
		if n == 1 {
			if d := t.sent.differences(a.view, topic, true); len(d) > 0 {
				s.problem(t.check, t.sent.key+" arrived different from what was sent: "+strings.Join(d, "; "))
			}
			if a.view.GetDeliveryAttempt() != 1 {
				s.problem(t.check, fmt.Sprintf("%s first arrived with deliveryAttempt %d", t.sent.key,
					a.view.GetDeliveryAttempt()))
			}
			t.changeStart = time.Now()
			if err := r.consumer.ChangeInvisibleDuration(a.view, extended); err != nil {
				s.problem(t.check, fmt.Sprintf("ChangeInvisibleDuration(%d s) of %s failed: %v",
					int(extended.Seconds()), t.sent.key, err))
			}
			t.changeEnd = time.Now()
			s.diagc(t.check, fmt.Sprintf("%s: ChangeInvisibleDuration %d ms after the receive, took %d ms",
				t.sent.key, ms(t.changeStart.Sub(a.at)), ms(t.changeEnd.Sub(t.changeStart))))
			continue
		}
		first := t.deliveries[0]
		if t.check == ack {
			when := ", before the ack"
			if !t.ackedAt.IsZero() {
				when = fmt.Sprintf(", %d ms after the ack", ms(a.at.Sub(t.ackedAt)))
			}
			s.problem(ack, fmt.Sprintf("%s came back %d ms after its first delivery%s (%s)",
				t.sent.key, ms(a.at.Sub(first.at)), when, describe(a.view)))
			continue
		}
		if n == 2 {
			oldDeadline := first.receiveStart.Add(invisible)
			newDeadline := t.changeStart.Add(extended)
			s.diagc(ext, fmt.Sprintf("%s redelivered %d ms after the first delivery (%d ms after the change), attempt %d",
				t.sent.key, ms(a.at.Sub(first.at)), ms(a.at.Sub(t.changeStart)), a.view.GetDeliveryAttempt()))
			if a.at.Before(newDeadline) {
				around := ""
				if a.at.Before(oldDeadline.Add(lateMs * time.Millisecond)) {
					around = ", i.e. around its original deadline"
				}
				s.problem(ext, fmt.Sprintf("%s came back %d ms after ChangeInvisibleDuration(%d s)%s",
					t.sent.key, ms(a.at.Sub(t.changeStart)), int(extended.Seconds()), around))
			} else if a.at.After(t.changeEnd.Add(extended + lateMs*time.Millisecond)) {
				s.problem(ext, fmt.Sprintf("%s came back %d ms after the change (allowed: %d ms)",
					t.sent.key, ms(a.at.Sub(t.changeEnd)), ms(extended)+lateMs))
			}
			if a.view.GetDeliveryAttempt() != 2 {
				s.problem(ext, fmt.Sprintf("%s came back with deliveryAttempt %d, expected 2",
					t.sent.key, a.view.GetDeliveryAttempt()))
			}
			if err := r.consumer.Ack(context.Background(), a.view); err != nil {
				s.problem(ext, fmt.Sprintf("ack of the redelivered %s failed: %v", t.sent.key, err))
			}
			t.done = true
			continue
		}
		s.problem(ext, fmt.Sprintf("%s came back again after its redelivery was acked (%s)", t.sent.key,
			describe(a.view)))
	}
	for _, t := range order {
		switch {
		case len(t.deliveries) == 0:
			s.problem(t.check, t.sent.key+" was never received; "+r.errors())
		case t.check == ext && !t.done:
			s.problem(ext, fmt.Sprintf("%s did not come back within %d ms of ChangeInvisibleDuration(%d s)",
				t.sent.key, ms(extended)+lateMs, int(extended.Seconds())))
		case t.check == ack && t.ackedAt.IsZero():
			s.problem(ack, t.sent.key+" was not acked (the scenario ran out of time)")
		}
	}
	s.report(ext)
	s.report(ack)
	return nil
}

func tagFilter(s *Scenario) error {
	check := "simple-tag-filter"
	topic := topicName("tag")
	ab, err := newReceiver(s, groupName("tag"), topic, rmq.NewFilterExpressionWithType("TagA||TagB", rmq.TAG),
		"TagA||TagB", invisible, true, 32)
	if err != nil {
		return err
	}
	defer ab.close()
	c, err := newReceiver(s, groupName("tagc"), topic, rmq.NewFilterExpressionWithType("TagC", rmq.TAG),
		"TagC", invisible, true, 32)
	if err != nil {
		return err
	}
	defer c.close()
	p, err := newProducer(s, topic, nil)
	if err != nil {
		return err
	}
	defer stopQuietly(s, "Producer", p.GracefulStop)
	wantAb := map[string]*Sent{}
	wantC := map[string]*Sent{}
	tags := []string{"TagC", "TagA", "TagB"}
	for i := 0; i < 18; i++ {
		tag := tags[i%3]
		l, err := sendN(p, topic, check, tag, i, 1)
		if err != nil {
			return err
		}
		if tag == "TagC" {
			wantC[l[0].key] = l[0]
		} else {
			wantAb[l[0].key] = l[0]
		}
	}
	gotAb := map[string]*Arrival{}
	gotC := map[string]*Arrival{}
	deadline := time.Now().Add(timeout(30))
	quietUntil := forever
	for {
		now := time.Now()
		if quietUntil == forever && len(gotAb) == len(wantAb) && len(gotC) == len(wantC) {
			quietUntil = now.Add(6 * time.Second)
		}
		if !now.Before(quietUntil) || !now.Before(deadline) {
			break
		}
		until := minTime(quietUntil, deadline)
		any := false
		for which := 0; which < 2; which++ {
			r, want, got, filter := ab, wantAb, gotAb, "TagA||TagB"
			if which == 1 {
				r, want, got, filter = c, wantC, gotC, "TagC"
			}
			a := r.tryPoll()
			if a == nil {
				continue
			}
			any = true
			k := keyOf(a.view)
			if want[k] == nil {
				s.problem(check, fmt.Sprintf("filter %q received a message with tag %s (%s)", filter,
					ps(a.view.GetTag()), describe(a.view)))
				continue
			}
			if got[k] != nil {
				s.problem(check, fmt.Sprintf("filter %q received %s twice", filter, k))
				continue
			}
			got[k] = a
			if d := want[k].differences(a.view, topic, true); len(d) > 0 {
				s.problem(check, k+" arrived different from what was sent: "+strings.Join(d, "; "))
			}
		}
		if !any {
			sleep := time.Until(until)
			if sleep > 50*time.Millisecond {
				sleep = 50 * time.Millisecond
			}
			if sleep < time.Millisecond {
				sleep = time.Millisecond
			}
			time.Sleep(sleep)
		}
	}
	if len(gotAb) < len(wantAb) {
		s.problem(check, fmt.Sprintf("filter \"TagA||TagB\" received %d of the %d TagA/TagB messages within %d s; %s",
			len(gotAb), len(wantAb), int(timeout(30).Seconds()), ab.errors()))
	}
	if len(gotC) < len(wantC) {
		s.problem(check, fmt.Sprintf("filter \"TagC\" received %d of the %d TagC messages within %d s; %s",
			len(gotC), len(wantC), int(timeout(30).Seconds()), c.errors()))
	}
	s.report(check)
	return nil
}
