package http

import (
	"net/http"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// The JSON views of the operator pages, for scripts (bearer clients) and
// for Accept: application/json.

type opsCaseJSON struct {
	PurchaseID        string           `json:"purchase_id"`
	Account           string           `json:"account"` // "platform" or acct_…
	ProviderPaymentID string           `json:"provider_payment_id,omitempty"`
	Amount            int64            `json:"amount"`
	Currency          string           `json:"currency"`
	AmountDisplay     string           `json:"amount_display"`
	Customer          string           `json:"customer"`
	Reference         string           `json:"reference,omitempty"`
	Description       string           `json:"description,omitempty"`
	State             string           `json:"state"`
	Final             bool             `json:"final"`
	Version           int64            `json:"version"`
	AgeSeconds        int64            `json:"age_seconds"`
	Age               string           `json:"age"`
	Escalated         bool             `json:"escalated"`
	EscalationReason  string           `json:"escalation_reason,omitempty"`
	EscalatedAt       *time.Time       `json:"escalated_at"`
	UncertainSince    *time.Time       `json:"uncertain_since"`
	CreatedAt         time.Time        `json:"created_at"`
	UpdatedAt         time.Time        `json:"updated_at"`
	Attempts          []attemptJSON    `json:"attempts"`
	Transitions       []transitionJSON `json:"transitions"`
	Webhooks          []opsWebhookJSON `json:"webhooks"`
	OperatorActions   []opsActionJSON  `json:"operator_actions"`
	// Findings are the audit's findings about the purchase, open and
	// closed.
	Findings []opsFindingJSON `json:"findings"`
	// Refunds are the purchase's refunds, oldest first.
	Refunds []opsRefundJSON `json:"refunds"`
	// Disputes are the disputes of the purchase's payments, oldest first,
	// with their histories.
	Disputes []opsDisputeJSON `json:"disputes"`
	// LiveView is the provider's answer an operator last asked for (POST
	// /ops/purchases/{id}/live); only on the single case, absent when
	// nobody has asked.
	LiveView *opsLiveViewJSON `json:"live_view,omitempty"`
}

// opsFindingJSON is one finding of the audit from the provider's side.
// Amount and currency are the provider's payment's: the money at risk.
type opsFindingJSON struct {
	ID            int64      `json:"id"`
	Provider      string     `json:"provider"`
	Kind          string     `json:"kind"`
	PaymentID     string     `json:"payment_id"`
	PurchaseID    string     `json:"purchase_id,omitempty"`
	Account       string     `json:"account,omitempty"` // its purchase's: "platform" or acct_…; none without a purchase
	Amount        int64      `json:"amount"`
	Currency      string     `json:"currency"`
	AmountDisplay string     `json:"amount_display"`
	Status        string     `json:"status,omitempty"`
	Evidence      string     `json:"evidence"`
	FoundAt       time.Time  `json:"found_at"`
	Open          bool       `json:"open"`
	ClosedAt      *time.Time `json:"closed_at"`
	ClosedBy      string     `json:"closed_by,omitempty"`
	CloseNote     string     `json:"close_note,omitempty"`
}

func opsFindingToJSON(f reconcile.Finding) opsFindingJSON {
	return opsFindingJSON{
		ID: f.ID, Provider: f.Provider, Kind: string(f.Kind), PaymentID: f.PaymentID, PurchaseID: f.PurchaseID,
		Account: f.AccountLabel(), Amount: f.Amount, Currency: f.Currency, AmountDisplay: provider.FormatAmount(f.Amount, f.Currency), Status: f.Status,
		Evidence: f.Evidence, FoundAt: f.FoundAt, Open: f.Open(), ClosedAt: opsTimePtr(f.ClosedAt),
		ClosedBy: f.ClosedBy, CloseNote: f.CloseNote,
	}
}

func opsFindingsToJSON(fs []reconcile.Finding) []opsFindingJSON {
	out := make([]opsFindingJSON, 0, len(fs))
	for _, f := range fs {
		out = append(out, opsFindingToJSON(f))
	}
	return out
}

type opsWebhookJSON struct {
	Provider    string     `json:"provider"`
	EventID     string     `json:"event_id"`
	Type        string     `json:"type"`
	PaymentID   string     `json:"payment_id,omitempty"`
	Result      string     `json:"result,omitempty"`
	Outcome     string     `json:"outcome"`
	ReceivedAt  time.Time  `json:"received_at"`
	ProcessedAt *time.Time `json:"processed_at"`
}

type opsActionJSON struct {
	Operator string    `json:"operator"`
	Action   string    `json:"action"`
	Saw      string    `json:"saw,omitempty"`
	Did      string    `json:"did"`
	Evidence string    `json:"evidence,omitempty"`
	At       time.Time `json:"at"`
}

type opsLiveViewJSON struct {
	Outcome   string `json:"outcome"`
	Status    string `json:"status,omitempty"`
	PaymentID string `json:"payment_id,omitempty"`
	// Text is the view as the audit records it. A resolution fetches and
	// records its own live view; this one is for the operator to read.
	Text  string `json:"text"`
	Error string `json:"error,omitempty"`
	// AskedAt is when the provider was asked.
	AskedAt time.Time `json:"asked_at"`
}

func opsCaseToJSON(c reconcile.Case, refunds []reconcile.Refund) opsCaseJSON {
	p := c.Purchase
	out := opsCaseJSON{
		PurchaseID: p.ID, Account: reconcile.AccountLabel(p.Account), ProviderPaymentID: p.ProviderPaymentID, Amount: p.Amount, Currency: p.Currency,
		AmountDisplay: provider.FormatAmount(p.Amount, p.Currency), Customer: p.Customer, Reference: p.Reference,
		Description: p.Description, State: string(p.State), Final: p.State.Terminal(), Version: p.Version,
		AgeSeconds: int64(c.Age / time.Second), Age: opsAge(c.Age), Escalated: p.Escalated(),
		EscalationReason: string(p.EscalationReason), EscalatedAt: opsTimePtr(p.EscalatedAt),
		UncertainSince: opsTimePtr(p.UncertainSince), CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
		Attempts: toAttemptsJSON(c.Attempts), Transitions: toTransitionsJSON(c.Transitions),
		Webhooks: []opsWebhookJSON{}, OperatorActions: []opsActionJSON{}, Findings: opsFindingsToJSON(c.Findings),
		Refunds: opsRefundsToJSON(refunds), Disputes: []opsDisputeJSON{},
	}
	for _, d := range c.Disputes {
		out.Disputes = append(out.Disputes, opsDisputeToJSON(d.Dispute, d.Transitions, c.Now))
	}
	for _, e := range c.Events {
		out.Webhooks = append(out.Webhooks, opsWebhookJSON{
			Provider: e.Provider, EventID: e.EventID, Type: e.Type, PaymentID: e.ObjectID, Result: string(e.Result),
			Outcome: string(e.Outcome), ReceivedAt: e.ReceivedAt, ProcessedAt: opsTimePtr(e.ProcessedAt),
		})
	}
	for _, a := range c.Actions {
		out.OperatorActions = append(out.OperatorActions, opsActionJSON{
			Operator: a.Operator, Action: a.Action, Saw: a.Saw, Did: a.Did, Evidence: a.Evidence, At: a.At,
		})
	}
	return out
}

// escalations answers the escalated cases and refunds, the open
// findings and the open disputes as JSON, of the account ?account=
// selects (see opsAccount), or the list page for anyone not asking for
// JSON.
func (o *Ops) escalations(w http.ResponseWriter, r *http.Request, who opsWho) {
	if !opsWantsJSON(r) {
		o.listPage(w, r, who)
		return
	}
	account, ok := o.opsAccount(w, r, who, true)
	if !ok {
		return
	}
	cases, err := o.svc.Escalations(r.Context(), account)
	if err != nil {
		o.log.Error("ops: list escalations", "err", err)
		writeKindError(w, reconcile.KindInternal, "could not read the escalated cases; try again")
		return
	}
	refundCases, err := o.svc.EscalatedRefunds(r.Context(), account)
	if err != nil {
		o.log.Error("ops: list escalated refunds", "err", err)
		writeKindError(w, reconcile.KindInternal, "could not read the escalated refunds; try again")
		return
	}
	findings, err := o.svc.Findings(r.Context(), account, false)
	if err != nil {
		o.log.Error("ops: list findings", "err", err)
		writeKindError(w, reconcile.KindInternal, "could not read the audit findings; try again")
		return
	}
	disputes, now, err := o.svc.OpenDisputes(r.Context(), account)
	if err != nil {
		o.log.Error("ops: list open disputes", "err", err)
		writeKindError(w, reconcile.KindInternal, "could not read the open disputes; try again")
		return
	}
	out := make([]opsCaseJSON, 0, len(cases))
	for _, c := range cases {
		refunds, err := o.svc.PurchaseRefunds(r.Context(), c.Purchase.ID)
		if err != nil {
			o.log.Error("ops: list a case's refunds", "purchase", c.Purchase.ID, "err", err)
			writeKindError(w, reconcile.KindInternal, "could not read the escalated cases' refunds; try again")
			return
		}
		out = append(out, opsCaseToJSON(c, refunds))
	}
	refunds := make([]opsRefundCaseJSON, 0, len(refundCases))
	for _, c := range refundCases {
		refunds = append(refunds, opsRefundCaseToJSON(c))
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"account": string(account), "count": len(out), "cases": out,
		"refunds_count": len(refunds), "refunds": refunds,
		"findings_count": len(findings), "findings": opsFindingsToJSON(findings),
		"money_at_risk":  opsMoneyAtRisk(findings, disputes),
		"disputes_count": len(disputes), "disputes": opsOpenDisputesJSON(disputes, now),
	})
}

// findings lists the audit's findings, the open ones or all of them with
// ?all=1, of the account ?account= selects (see opsAccount): a page, or
// JSON for clients that ask for it.
func (o *Ops) findings(w http.ResponseWriter, r *http.Request, who opsWho) {
	asJSON := opsWantsJSON(r)
	all, ok := opsBool(r.URL.Query().Get("all"))
	if !ok {
		msg := "all: " + quote(r.URL.Query().Get("all")) + " is not a yes/no value"
		o.cannotShow(w, r, who, asJSON, reconcile.KindInvalid, msg, "Not a yes/no value", msg+".")
		return
	}
	account, ok := o.opsAccount(w, r, who, asJSON)
	if !ok {
		return
	}
	findings, err := o.svc.Findings(r.Context(), account, all)
	if err != nil {
		o.log.Error("ops: list findings", "err", err)
		o.cannotShow(w, r, who, asJSON, reconcile.KindInternal, "could not read the audit findings; try again",
			"Could not read the findings", "The audit findings could not be read from the database. Reload to try again.")
		return
	}
	// The money at risk is the one count, open disputes included, as on
	// the list page.
	disputes, _, err := o.svc.OpenDisputes(r.Context(), account)
	if err != nil {
		o.log.Error("ops: list open disputes", "err", err)
		o.cannotShow(w, r, who, asJSON, reconcile.KindInternal, "could not read the open disputes; try again",
			"Could not read the disputes", "The open disputes could not be read from the database. Reload to try again.")
		return
	}
	if asJSON {
		writeJSON(w, http.StatusOK, map[string]any{"account": string(account), "count": len(findings), "findings": opsFindingsToJSON(findings)})
		return
	}
	title := "Open audit findings"
	if all {
		title = "All audit findings"
	}
	o.render(w, http.StatusOK, "findings", opsFindingsData{
		opsBase: o.base(title, who), All: all, Account: string(account), Findings: opsFindingRows(findings),
		MoneyAtRisk: opsMoneyAtRisk(findings, disputes),
	})
}

// opsFindingsData is the page of /ops/findings.
type opsFindingsData struct {
	opsBase
	All bool // closed findings too
	// Account is the account filter, "" for every account.
	Account     string
	Findings    []opsFindingRow
	MoneyAtRisk []string
}
