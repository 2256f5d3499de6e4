package http

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The operator actions (recheck, resolve, note, close a finding; refund a
// duplicate charge is in ops_refunds.go) and their answers, done or
// refused.

// done answers a successful action: JSON for scripts, else a redirect to
// the case page with a signed flash message (unsigned ones are ignored,
// so a link cannot put words on the page).
func (o *Ops) done(w http.ResponseWriter, r *http.Request, who opsWho, msg string) {
	id := r.PathValue("id")
	if opsWantsJSON(r) {
		c, err := o.svc.Case(r.Context(), id)
		var refunds []reconcile.Refund
		if err == nil {
			refunds, err = o.svc.PurchaseRefunds(r.Context(), id)
		}
		if err != nil {
			writeJSON(w, http.StatusOK, map[string]any{"message": msg})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"message": msg, "case": opsCaseToJSON(c, refunds)})
		return
	}
	q := url.Values{"flash": {msg}, "fs": {o.flashSig(id, msg)}}
	http.Redirect(w, r, "/ops/purchases/"+url.PathEscape(id)+"?"+q.Encode(), http.StatusSeeOther)
}

// actionError answers a refused action: JSON for scripts; for browsers
// the case page again, with the message, the status and what they typed.
func (o *Ops) actionError(w http.ResponseWriter, r *http.Request, who opsWho, status int, code, msg string) {
	if opsWantsJSON(r) {
		if code == codeOf(reconcile.KindBusy) {
			w.Header().Set("Retry-After", "5")
		}
		writeError(w, status, code, msg)
		return
	}
	if r.PathValue("fid") != "" { // an action on an audit finding
		if status == statusOf(reconcile.KindNotFound) {
			o.renderError(w, r, who, status, "No such finding", msg)
			return
		}
		o.showFinding(w, r, who, status, &opsFlash{Error: true, Text: msg}, opsFindingForm{
			Note: r.PostForm.Get("note"), Amount: r.PostForm.Get("amount"), Evidence: r.PostForm.Get("evidence"),
		})
		return
	}
	if status == statusOf(reconcile.KindNotFound) {
		o.renderError(w, r, who, status, "No such purchase", msg)
		return
	}
	form := opsForm{
		To: r.PostForm.Get("to"), Evidence: r.PostForm.Get("evidence"), Override: r.PostForm.Get("override_provider"),
		Note: r.PostForm.Get("text"), Close: r.PostForm.Get("close") != "",
		Disagrees: code == codeOf(reconcile.KindProviderDisagrees),
	}
	o.showCase(w, r, who, status, &opsFlash{Error: true, Text: msg}, form)
}

// refuse answers a refused action with the status and code of kind k
// and msg.
func (o *Ops) refuse(w http.ResponseWriter, r *http.Request, who opsWho, k reconcile.Kind, msg string) {
	o.actionError(w, r, who, statusOf(k), codeOf(k), msg)
}

// serviceError answers an error of the Service with its kind's status and
// code and a message an operator can act on. A kind an operator cannot
// act on is an internal error.
func (o *Ops) serviceError(w http.ResponseWriter, r *http.Request, who opsWho, action string, err error) {
	id := r.PathValue("id")
	k := reconcile.KindOf(err)
	var msg string
	switch k {
	case reconcile.KindNotFound:
		msg = "There is no purchase with id " + quote(id) + "."
	case reconcile.KindStale:
		msg = "Not done: the purchase changed since this page was shown (" + errDetail(err) +
			"). Look at it again, with the provider's live view as it is now, before deciding."
	case reconcile.KindAlreadyFinal:
		msg = "Not done: the purchase is already final (" + errDetail(err) +
			"). An operator cannot change a final state."
	case reconcile.KindBusy:
		msg = "Not done: a worker is checking this purchase right now. Reload in a few seconds and look again."
	case reconcile.KindForbiddenTransition:
		msg = "Not done: the state machine does not allow this from the purchase's current state (" + errDetail(err) + ")."
	case reconcile.KindProviderDisagrees:
		o.providerDisagrees(w, r, who, err)
		return
	case reconcile.KindInvalid:
		msg = "Not done: " + opsInvalid(err)
	default:
		o.log.Error("ops: action", "action", action, "purchase", id, "operator", who.Operator, "err", err)
		k = reconcile.KindInternal
		msg = "Not done: an internal error stopped the " + action + ". Nothing was changed; reload the page and try again."
	}
	o.refuse(w, r, who, k, msg)
}

// providerDisagrees answers a resolution the provider's live view
// contradicts: 409 provider_disagrees, saying what the provider answered
// (the live view Resolve fetched and recorded, and the judge's reason)
// and how to override it. JSON clients get the answer in
// error.provider_answer too.
func (o *Ops) providerDisagrees(w http.ResponseWriter, r *http.Request, who opsWho, err error) {
	id := r.PathValue("id")
	why := errDetail(err)
	answer := o.lastLiveView(r, id, who.Operator)
	o.log.Warn("ops: resolve refused: the provider disagrees", "purchase", id, "operator", who.Operator, "why", why, "provider", answer)
	msg := "Not done: the provider's live view contradicts this resolution: " + why + "."
	if answer != "" {
		msg += " The provider answered: " + answer + "."
	}
	if opsWantsJSON(r) {
		msg += " Nothing changed. If you are sure the provider is wrong, resolve again with override_provider set to your reason; the provider's answer and your reason are both recorded."
		k := reconcile.KindProviderDisagrees
		writeJSON(w, statusOf(k), map[string]any{"error": map[string]string{
			"code": codeOf(k), "message": msg, "reason": why, "provider_answer": answer,
		}})
		return
	}
	msg += " Nothing changed. If you are sure the provider is wrong, give your reason under \"Override the provider\" and resolve again; the provider's answer and your reason are both recorded."
	o.refuse(w, r, who, reconcile.KindProviderDisagrees, msg)
}

// lastLiveView describes the provider call Resolve made for operator, the
// latest call the purchase's audit records under that operator, or "".
func (o *Ops) lastLiveView(r *http.Request, id, operator string) string {
	c, err := o.svc.Case(r.Context(), id)
	if err != nil {
		return ""
	}
	for i := len(c.Attempts) - 1; i >= 0; i-- {
		a := c.Attempts[i]
		if a.Actor != "operator:"+operator {
			continue
		}
		parts := []string{string(a.Op) + " → " + string(a.Outcome)}
		if a.Status != "" {
			parts = append(parts, "status "+a.Status)
		}
		if a.PaymentID != "" {
			parts = append(parts, "payment "+a.PaymentID)
		}
		if a.Error != "" {
			parts = append(parts, "error: "+a.Error)
		}
		return strings.Join(parts, ", ")
	}
	return ""
}

// opsInvalid lists the invalid fields of err, or says what is invalid.
func opsInvalid(err error) string {
	var msgs []string
	for _, fe := range fieldErrors(err) {
		msgs = append(msgs, fe.Error())
	}
	if len(msgs) == 0 {
		return errDetail(err)
	}
	return strings.Join(msgs, "; ")
}

func (o *Ops) recheck(w http.ResponseWriter, r *http.Request, who opsWho) {
	id := r.PathValue("id")
	before, err := o.svc.Case(r.Context(), id)
	if err != nil {
		o.serviceError(w, r, who, "recheck", err)
		return
	}
	after, err := o.svc.Recheck(r.Context(), id, who.Operator)
	if err != nil {
		o.serviceError(w, r, who, "recheck", err)
		return
	}
	o.log.Info("ops: recheck", "purchase", id, "operator", who.Operator, "from", before.Purchase.State, "to", after.State)
	msg := fmt.Sprintf("Rechecked with the provider: %s → %s.", before.Purchase.State, after.State)
	if !after.State.Terminal() {
		msg += " The outcome is still not known."
	}
	o.done(w, r, who, msg)
}

// askProvider asks the provider for its live view of the purchase now:
// the one ops request that does, so each ask spends budget and is
// recorded in the purchase's audit once. It changes nothing else.
func (o *Ops) askProvider(w http.ResponseWriter, r *http.Request, who opsWho) {
	id := r.PathValue("id")
	live, err := o.svc.LiveView(r.Context(), id)
	if err != nil {
		o.serviceError(w, r, who, "live view", err)
		return
	}
	o.log.Info("ops: live view", "purchase", id, "operator", who.Operator, "outcome", live.Outcome)
	o.done(w, r, who, "Asked the provider: "+reconcile.DescribeView(live)+".")
}

func (o *Ops) resolve(w http.ResponseWriter, r *http.Request, who opsWho) {
	f := r.PostForm
	evidence, bad := opsCheckText("evidence", f.Get("evidence"))
	if bad != "" {
		o.refuse(w, r, who, reconcile.KindInvalid, "Not done: "+bad)
		return
	}
	override, bad := opsCheckText("override_provider", f.Get("override_provider"))
	if bad != "" {
		o.refuse(w, r, who, reconcile.KindInvalid, "Not done: "+bad)
		return
	}
	version, err := strconv.ParseInt(strings.TrimSpace(f.Get("version")), 10, 64)
	if err != nil || version <= 0 {
		o.refuse(w, r, who, reconcile.KindInvalid,
			"Not done: version: is required: the purchase version shown with the live view (reload the case page)")
		return
	}
	to := statemachine.State(strings.TrimSpace(f.Get("to")))
	p, err := o.svc.Resolve(r.Context(), reconcile.Resolution{
		PurchaseID: r.PathValue("id"), Operator: who.Operator, To: to,
		Evidence: evidence, Version: version, OverrideProvider: override,
	})
	if err != nil {
		o.serviceError(w, r, who, "resolve", err)
		return
	}
	o.log.Info("ops: resolved", "purchase", p.ID, "operator", who.Operator, "to", p.State, "override", override)
	msg := fmt.Sprintf("Resolved as %s by %s.", p.State, who.Operator)
	if override != "" {
		msg = fmt.Sprintf("Resolved as %s by %s, with an override reason recorded beside the provider's answer.", p.State, who.Operator)
	}
	o.done(w, r, who, msg)
}

func (o *Ops) note(w http.ResponseWriter, r *http.Request, who opsWho) {
	text, bad := opsCheckText("text", r.PostForm.Get("text"))
	if bad != "" {
		o.refuse(w, r, who, reconcile.KindInvalid, "Not done: "+bad)
		return
	}
	close, ok := opsBool(r.PostForm.Get("close"))
	if !ok {
		o.refuse(w, r, who, reconcile.KindInvalid,
			"Not done: close: "+quote(strings.TrimSpace(r.PostForm.Get("close")))+" is not a yes/no value")
		return
	}
	id := r.PathValue("id")
	if err := o.svc.Note(r.Context(), id, who.Operator, text, close); err != nil {
		o.serviceError(w, r, who, "note", err)
		return
	}
	msg := "Note added."
	if close {
		msg = "Note added; the escalation is closed."
	}
	o.log.Info("ops: note", "purchase", id, "operator", who.Operator, "close", close)
	o.done(w, r, who, msg)
}

// closeFinding closes an audit finding with the operator's note. It moves
// no money and no purchase.
func (o *Ops) closeFinding(w http.ResponseWriter, r *http.Request, who opsWho) {
	notFound := "There is no audit finding with id " + quote(r.PathValue("fid")) + "."
	id, ok := findingID(r)
	if !ok {
		o.refuse(w, r, who, reconcile.KindNotFound, notFound)
		return
	}
	note, bad := opsCheckText("note", r.PostForm.Get("note"))
	if bad == "" && note == "" {
		bad = "note: is required: say how the finding was handled (a refund's id, who checked it)"
	}
	if bad != "" {
		o.refuse(w, r, who, reconcile.KindInvalid, "Not done: "+bad)
		return
	}
	f, err := o.svc.CloseFinding(r.Context(), id, who.Operator, note)
	if err != nil {
		switch k := reconcile.KindOf(err); k {
		case reconcile.KindNotFound:
			o.refuse(w, r, who, k, notFound)
		case reconcile.KindConflict:
			// The close lost to another: the table's status, with a code
			// that says what the conflict is.
			o.actionError(w, r, who, statusOf(k), "already_closed", "Not done: the finding is already closed; nothing changed.")
		case reconcile.KindInvalid:
			o.refuse(w, r, who, k, "Not done: "+opsInvalid(err))
		default:
			o.log.Error("ops: close finding", "finding", id, "operator", who.Operator, "err", err)
			o.refuse(w, r, who, reconcile.KindInternal, "Not done: an internal error stopped closing the finding. Nothing was changed; reload the page and try again.")
		}
		return
	}
	o.log.Info("ops: closed audit finding", "finding", id, "kind", f.Kind, "operator", who.Operator)
	msg := fmt.Sprintf("Finding %d closed by %s.", f.ID, who.Operator)
	if opsWantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]any{"message": msg, "finding": opsFindingToJSON(f)})
		return
	}
	fid := strconv.FormatInt(f.ID, 10)
	q := url.Values{"flash": {msg}, "fs": {o.findingFlashSig(fid, msg)}}
	http.Redirect(w, r, "/ops/findings/"+fid+"?"+q.Encode(), http.StatusSeeOther)
}

// opsCheckText trims a text field and says what is wrong with it, if
// anything.
func opsCheckText(field, text string) (string, string) {
	text = strings.TrimSpace(text)
	switch {
	case !utf8.ValidString(text):
		return "", field + ": is not valid UTF-8"
	case utf8.RuneCountInString(text) > opsMaxText:
		return "", fmt.Sprintf("%s: is longer than %d characters", field, opsMaxText)
	case strings.ContainsFunc(text, func(r rune) bool { return (r < 0x20 && r != '\n' && r != '\r' && r != '\t') || r == 0x7f }):
		return "", field + ": contains control characters"
	}
	return text, ""
}
