package policy

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/execgate/execgate/tenancy"
)

var platformDefaults = Limits{TimeoutMS: 5000, CPUMS: 5000, MemoryMB: 256, Pids: 32, OutputBytes: 1 << 20, TmpMB: 64,
	Files: 32, FilesBytes: 8 << 20, Artifacts: 32, ArtifactsBytes: 8 << 20}

// TestDefaultPolicies evaluates the real embedded policies for every
// default rule.
func TestDefaultPolicies(t *testing.T) {
	e := newEngine(t, Options{})
	admin := tenancy.Principal{TenantID: "demo", Subject: "root", Roles: []string{"executor", "admin"}}
	hostTenant := demoTenant()
	hostTenant.Policy["network"] = []any{"none", "host"}
	bigTenant := demoTenant()
	bigTenant.Policy["max_limits"] = map[string]any{"memory_mb": 100000, "tmp_mb": 16}
	disabled := demoTenant()
	disabled.Policy["disabled"] = true
	broken := demoTenant()
	broken.Policy["network"] = "proxy"
	auditing := demoTenant()
	auditing.Policy["audit"] = map[string]any{"record_source": true}
	keyed := demoTenant()
	keyed.Policy["secrets"] = []any{"API_KEY", "DB_PASSWORD"}

	type want struct {
		allow        bool
		reasons      []string // exact, sorted
		network      string
		limits       *Limits // nil: not checked
		egress       []string
		requirements *bool
		tools        []string // nil: not checked
		secrets      []string // nil: []
		recordSource bool
	}
	yes, no := true, false
	tests := []struct {
		name   string
		tenant *tenancy.Tenant // nil: demoTenant()
		who    tenancy.Principal
		req    Request
		want   want
	}{
		{
			name: "a plain run is allowed with the platform defaults",
			req:  Request{Source: "def run(a, c): return 1"},
			want: want{allow: true, reasons: []string{}, network: "none", limits: &platformDefaults, egress: []string{}, requirements: &yes, tools: []string{"calendar", "search"}},
		},
		{
			name:   "an unknown tenant is denied",
			tenant: &tenancy.Tenant{},
			want:   want{reasons: []string{"unknown tenant"}, network: "none"},
		},
		{
			name:   "a disabled tenant is denied",
			tenant: &disabled,
			want:   want{reasons: []string{`tenant "demo" is disabled`}, network: "none"},
		},
		{
			name:   "malformed tenant data is denied",
			tenant: &broken,
			want:   want{reasons: []string{"tenant policy data network must be array, not string"}, network: "none"},
		},
		{
			name: "a subject without role executor is denied",
			who:  tenancy.Principal{Subject: "u2", Roles: []string{"policy-author"}},
			want: want{reasons: []string{"subject lacks role executor"}, network: "none"},
		},
		{
			name: "an unsupported language is denied",
			req:  Request{Language: "ruby"},
			want: want{reasons: []string{`language "ruby" is not supported`}, network: "none"},
		},
		{
			name: "an unknown mode is denied",
			req:  Request{Mode: "debug"},
			want: want{reasons: []string{`mode "debug" is not run or test`}, network: "none"},
		},
		{
			name: "proxy is allowed when tenant data allows it, with egress = requested ∩ allow-list",
			req:  Request{NetworkAccess: "proxy", EgressAllow: []string{"API.example.com", "pypi.org:443"}},
			want: want{allow: true, reasons: []string{}, network: "proxy", egress: []string{"api.example.com:443", "pypi.org:443"}},
		},
		{
			name: "a requested egress host outside the allow-list denies the run, naming each such host",
			req:  Request{NetworkAccess: "proxy", EgressAllow: []string{"API.example.com", "evil.test:443", "example.com:443"}},
			want: want{reasons: []string{
				`egress host "evil.test:443" is not in the tenant's egress allow-list`,
				`egress host "example.com:443" is not in the tenant's egress allow-list`,
			}, network: "none", egress: []string{}},
		},
		{
			name:   "proxy is denied when tenant data does not allow it",
			tenant: &hostTenant,
			req:    Request{NetworkAccess: "proxy"},
			want:   want{reasons: []string{`network_access "proxy" is not allowed for tenant "demo"`}, network: "none", egress: []string{}},
		},
		{
			name:   "host is allowed for an admin when tenant data allows it",
			tenant: &hostTenant,
			who:    admin,
			req:    Request{NetworkAccess: "host", EgressAllow: []string{"api.example.com"}},
			want:   want{allow: true, reasons: []string{}, network: "host", egress: []string{}},
		},
		{
			name:   "host is denied to a non-admin even when tenant data allows it",
			tenant: &hostTenant,
			req:    Request{NetworkAccess: "host"},
			want:   want{reasons: []string{"network_access host requires role admin"}, network: "none"},
		},
		{
			name: "host is denied to an admin when tenant data does not allow it",
			who:  admin,
			req:  Request{NetworkAccess: "host"},
			want: want{reasons: []string{`network_access "host" is not allowed for tenant "demo"`}, network: "none"},
		},
		{
			name: "an unknown network mode is denied",
			req:  Request{NetworkAccess: "bridge"},
			want: want{reasons: []string{`network_access "bridge" is not none, proxy or host`}, network: "none"},
		},
		{
			name: "requested limits are capped by tenant and platform maxima, unrequested get defaults",
			req:  Request{Limits: Limits{TimeoutMS: 50000, CPUMS: 999999, MemoryMB: 300, Pids: 10}},
			want: want{allow: true, reasons: []string{}, network: "none",
				limits: &Limits{TimeoutMS: 30000, CPUMS: 60000, MemoryMB: 300, Pids: 10, OutputBytes: 1 << 20, TmpMB: 64, Files: 32, FilesBytes: 8 << 20, Artifacts: 32, ArtifactsBytes: 8 << 20}},
		},
		{
			name:   "a tenant max above the platform max cannot raise a limit; a lower one caps the default",
			tenant: &bigTenant,
			req:    Request{Limits: Limits{MemoryMB: 100000}},
			want: want{allow: true, reasons: []string{}, network: "none",
				limits: &Limits{TimeoutMS: 5000, CPUMS: 5000, MemoryMB: 2048, Pids: 32, OutputBytes: 1 << 20, TmpMB: 16, Files: 32, FilesBytes: 8 << 20, Artifacts: 32, ArtifactsBytes: 8 << 20}},
		},
		{
			name: "a negative limit is denied",
			req:  Request{Limits: Limits{Pids: -1}},
			want: want{reasons: []string{"limits.pids must be a non-negative integer"}, network: "none"},
		},
		{
			name: "allow-listed requirements are allowed",
			req:  Request{Requirements: []string{"six==1.16.0", "SIX"}},
			want: want{allow: true, reasons: []string{}, network: "none", requirements: &yes},
		},
		{
			name: "a requirement outside the allow-list is denied",
			req:  Request{Requirements: []string{"six", "numpy==2.0"}},
			want: want{reasons: []string{`package "numpy" is not in tenant "demo"'s allow-list`}, network: "none", requirements: &no},
		},
		{
			name: "the platform deny-list beats the tenant allow-list",
			req:  Request{Requirements: []string{"pip==24.0"}},
			want: want{reasons: []string{`package "pip" is on the platform deny-list`}, network: "none", requirements: &no},
		},
		{
			name: "the tenant deny-list beats the tenant allow-list",
			req:  Request{Requirements: []string{"requests"}},
			want: want{reasons: []string{`package "requests" is on tenant "demo"'s deny-list`}, network: "none", requirements: &no},
		},
		{
			name: "a direct reference is not a requirement",
			req:  Request{Requirements: []string{"six @ https://evil.test/six.whl"}},
			want: want{reasons: []string{`requirement "six @ https://evil.test/six.whl" is not a valid requirement (name[extras] [op version])`}, network: "none", requirements: &no},
		},
		{
			name: "an invalid egress entry is denied",
			req:  Request{NetworkAccess: "proxy", EgressAllow: []string{"http://x.test/"}},
			want: want{reasons: []string{`egress host "http://x.test/" is not a valid host[:port] pattern`}, network: "none", egress: []string{}},
		},
		{
			name: "requested tools the tenant grants are granted",
			req:  Request{Tools: []string{"search"}},
			want: want{allow: true, reasons: []string{}, network: "none", tools: []string{"search"}},
		},
		{
			name: "a tool the tenant does not grant is denied",
			req:  Request{Tools: []string{"search", "shell"}},
			want: want{reasons: []string{`tool "shell" is not granted to tenant "demo"`}, network: "none"},
		},
		{
			name: "test mode forces network none and no tools",
			req:  Request{Mode: "test", NetworkAccess: "proxy", EgressAllow: []string{"api.example.com"}, Tools: []string{"shell"}},
			want: want{allow: true, reasons: []string{}, network: "none", egress: []string{}, tools: []string{}},
		},
		{
			name: "a run that asks for no secrets gets none",
			req:  Request{},
			want: want{allow: true, reasons: []string{}, network: "none"},
		},
		{
			name:   "secrets the tenant grants are granted, sorted",
			tenant: &keyed,
			req:    Request{Secrets: []string{"DB_PASSWORD", "API_KEY"}},
			want:   want{allow: true, reasons: []string{}, network: "none", secrets: []string{"API_KEY", "DB_PASSWORD"}},
		},
		{
			name:   "a secret the tenant does not grant denies the run, naming it",
			tenant: &keyed,
			req:    Request{Secrets: []string{"API_KEY", "ROOT_TOKEN"}},
			want:   want{reasons: []string{`secret "ROOT_TOKEN" is not granted to tenant "demo"`}, network: "none"},
		},
		{
			name: "a tenant without secrets grants none",
			req:  Request{Secrets: []string{"API_KEY"}},
			want: want{reasons: []string{`secret "API_KEY" is not granted to tenant "demo"`}, network: "none"},
		},
		{
			name:   "test mode gets no real secrets (its fixtures stand in)",
			tenant: &keyed,
			req:    Request{Mode: "test", Secrets: []string{"API_KEY", "ANYTHING"}},
			want:   want{allow: true, reasons: []string{}, network: "none"},
		},
		{
			name:   "tenant data can ask the audit log to record the source",
			tenant: &auditing,
			want:   want{allow: true, reasons: []string{}, network: "none", recordSource: true},
		},
		{
			name: "every violation is reported, sorted",
			who:  tenancy.Principal{Subject: "u3"},
			req:  Request{NetworkAccess: "host", Requirements: []string{"numpy"}, Tools: []string{"shell"}},
			want: want{network: "none", requirements: &no, reasons: []string{
				`network_access "host" is not allowed for tenant "demo"`,
				"network_access host requires role admin",
				`package "numpy" is not in tenant "demo"'s allow-list`,
				"subject lacks role executor",
				`tool "shell" is not granted to tenant "demo"`,
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tenant, who := demoTenant(), tc.who
			if tc.tenant != nil {
				tenant = *tc.tenant
			}
			if who.Subject == "" {
				who = executor()
			}
			d, err := e.Decide(context.Background(), BuildInput(tenant, who, tc.req))
			require.NoError(t, err)
			require.NotEmpty(t, d.ID)
			require.Equal(t, tc.want.allow, d.Allow, "allow (reasons %q)", d.Reasons)
			require.Equal(t, tc.want.reasons, d.Reasons)
			require.Equal(t, tc.want.network, d.NetworkAccess)
			if tc.want.limits != nil {
				require.Equal(t, *tc.want.limits, d.Limits)
			}
			if tc.want.egress != nil {
				require.Equal(t, tc.want.egress, d.Egress.Allow)
			}
			if tc.want.requirements != nil {
				require.Equal(t, *tc.want.requirements, d.RequirementsAllowed)
			}
			if tc.want.tools != nil {
				require.Equal(t, tc.want.tools, d.Tools)
			}
			if tc.want.secrets == nil {
				tc.want.secrets = []string{}
			}
			require.Equal(t, tc.want.secrets, d.Secrets)
			require.Equal(t, tc.want.recordSource, d.Audit.RecordSource)
		})
	}
}
