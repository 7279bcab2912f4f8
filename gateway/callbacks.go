package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/execution/async"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/webhook"
)

// The callback_url of POST /v1/executions: checked at submit — a URL, a
// tenant with webhook secrets, a host the tenant's policy grants
// (data.execgate.main.callback) — and, once the execution is done, sent
// signed per Standard Webhooks through the egress address rules (package
// webhook). A refused callback refuses the submission (audited like any
// refused execute request); nothing is run.

// CallbackDecider decides callback URLs (*policy.Engine).
type CallbackDecider interface {
	DecideCallback(ctx context.Context, in policy.CallbackInput) (policy.CallbackDecision, error)
}

// WebhookSender delivers callbacks in the background (*webhook.Sender).
type WebhookSender interface {
	Send(d webhook.Delivery)
	Drain(ctx context.Context) error
}

// maxCallbackURLBytes bounds callback_url.
const maxCallbackURLBytes = 2048

// CallbackEvent is the type of the payload sent when an execution is done.
const CallbackEvent = "execution.completed"

// parseCallback checks raw as a callback URL and returns the policy's view
// of it.
func parseCallback(raw string) (policy.CallbackField, error) {
	bad := func(format string, args ...any) (policy.CallbackField, error) {
		return policy.CallbackField{}, badRequest("callback_url", format, args...)
	}
	if len(raw) > maxCallbackURLBytes {
		return bad("%d bytes is over the %d-byte cap", len(raw), maxCallbackURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" {
		return bad("must be an absolute http or https URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad("scheme %q: must be http or https", u.Scheme)
	}
	if u.User != nil {
		return bad("must not carry credentials (user:password@)")
	}
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return bad("has no host")
	}
	port := 443
	if u.Scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return bad("port %q is not 1-65535", p)
		}
	}
	return policy.CallbackField{URL: raw, Scheme: u.Scheme, Host: host, Port: port}, nil
}

// callback checks the callback raw of an execution p submits for tenant
// and returns what delivers it once the execution is done.
func (s *Server) callback(ctx context.Context, p tenancy.Principal, tenant tenancy.Tenant, raw string) (func(context.Context, async.Record), error) {
	if s.d.Webhooks == nil || s.d.Callbacks == nil {
		return nil, badRequest("callback_url", "webhooks are not enabled on this gateway")
	}
	cb, err := parseCallback(raw)
	if err != nil {
		return nil, err
	}
	data := tenant.Policy
	if data == nil {
		data = map[string]any{}
	}
	dec, err := s.d.Callbacks.DecideCallback(ctx, policy.CallbackInput{
		Tenant:   policy.TenantInput{ID: tenant.ID, Plan: tenant.Plan, Data: data},
		Subject:  policy.SubjectInput{Sub: p.Subject, Roles: p.Roles},
		Callback: cb,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", execution.ErrPolicy, err)
	}
	if !dec.Allow {
		return nil, execution.Denied(dec.Reasons)
	}
	if _, err := tenant.Webhooks.Keys(os.Getenv); err != nil {
		s.log.WarnContext(ctx, "webhook secrets unusable", "tenant_id", tenant.ID, "err", err)
		return nil, badRequest("callback_url", "the tenant has no usable webhook secret (tenants[].webhooks.secrets)")
	}
	s.log.InfoContext(ctx, "callback allowed", "tenant_id", tenant.ID, "decision_id", dec.ID, "callback_host", cb.Host)
	cfg := tenant.Webhooks
	return func(ctx context.Context, rec async.Record) {
		s.d.Webhooks.Send(webhook.Delivery{URL: cb.URL, Webhook: cfg, Type: CallbackEvent,
			Data: callbackData(rec), Record: callbackRecord(p, rec)})
	}, nil
}

// callbackData is the payload's data: the execution as GET shows it.
func callbackData(rec async.Record) []byte {
	b, err := json.Marshal(executionStatus(rec))
	if err != nil {
		return []byte(`{}`)
	}
	return b
}

// callbackRecord is the audit record every delivery attempt starts from:
// the execution's tenant, submitter and outcome.
func callbackRecord(p tenancy.Principal, rec async.Record) audit.Record {
	out := audit.Outcome{HTTPStatus: rec.HTTPStatus, Status: "error"}
	if out.HTTPStatus < 100 || out.HTTPStatus > 599 {
		out.HTTPStatus = 500
	}
	var env struct {
		Status string `json:"status"`
		Error  *struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(rec.Envelope, &env) == nil {
		if env.Status == "ok" {
			out.Status = "ok"
		}
		if env.Error != nil {
			out.ErrorType = env.Error.Type
		}
	}
	return audit.Record{ExecutionID: rec.ExecutionID, TenantID: rec.TenantID, Subject: p.Subject, Roles: p.Roles,
		Quota: audit.Quota{Outcome: audit.QuotaSkipped}, Outcome: out}
}
