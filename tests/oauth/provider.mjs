// The OAuth end-to-end tests' authorization server and protected MCP resource.
//
//   node provider.mjs --upstream http://127.0.0.1:F/mcp [--ttl SECONDS] [--wrong-issuer]
//
// Starts, on 127.0.0.1 and ephemeral ports:
//   - oidc-provider (a certified OpenID/OAuth server) as the authorization server: dynamic
//     registration, PKCE (S256 only), resource indicators (RFC 8707: opaque access tokens whose
//     audience is the resource), refresh tokens with rotation, access tokens living --ttl
//     seconds (default 8), revocation (RFC 7009), and its development login + consent pages
//     (any user name), which a test completes over plain HTTP as a browser would;
//   - the protected resource in front of the MCP server at --upstream: `/mcp` answers 401 with
//     `WWW-Authenticate: Bearer resource_metadata="…"` without a valid token, checks the
//     token's audience and scope (the provider's own token store: what introspection answers),
//     answers 403 `insufficient_scope` for a tool that needs a scope the token lacks, and
//     forwards everything else (the token removed); `/.well-known/oauth-protected-resource`
//     and `/.well-known/oauth-protected-resource/mcp` serve RFC 9728 metadata whose `resource`
//     is the resource's origin (`http://127.0.0.1:R/`), so it differs from the MCP URL.
//   - controls, on the resource port (never under /mcp):
//       POST /control/revoke             revokes every grant (access and refresh tokens)
//       POST /control/drop-access-tokens access tokens stop working (as if expired), refresh
//                                        tokens still do
//       POST /control/require-scope      body {"tool": NAME, "scope": SCOPE}
//       GET  /control/log                what the servers saw, as JSON lines of events (no
//                                        token, code or secret in them)
//       POST /control/echo-headers       the next tools/call on /mcp answers 500 with the
//                                        request's headers (token included) as its body, like
//                                        a careless server's error page
//       GET  /control/issued             every code, access token, refresh token and client
//                                        secret issued so far, for the tests' secret scans
// --last-authorization: /mcp reads the last `Authorization` header of a request (as a server
//   that keeps the last of repeated headers does), not the first. A request with more than
//   one is recorded in the control log either way (`authorizationHeaders`: how many).
// --wrong-issuer: the authorization server's metadata names another issuer than its URL.
// --bare-origin: the resource identifier is `http://127.0.0.1:R` (no `/`), compared exactly.
// --par: pushed authorization requests (RFC 9126) are offered (off otherwise).
// --resource-scopes-only: the authorization server knows only `openid` and `offline_access`;
//   the resource's scopes exist only under the resource (resource indicators), so a
//   registration that names them is refused (400 invalid_client_metadata), as oidc-provider
//   configured as its documentation shows does.
// --metadata-override JSON: fields replacing those of the authorization server's metadata
//   (`RESOURCE_PORT` in a value becomes the resource's port), for hostile-server tests.
// --endless token|refresh|metadata: the token endpoint (every POST, or every POST after the
//   first, i.e. the refreshes after the login's code exchange) or the authorization server's
//   metadata answers 200 with a streamed body of 1.5 GB; the bytes written before the client
//   stopped reading are logged as {"server": "endless", "route", "sent"}.
// Any path under /trap/ on the resource port is logged as {"server": "trap", "path", "method"}
//   and answered 200 (a URL an endpoint override names to show that nothing was sent there).
// E2E_CLIENT_SECRET (environment): also a pre-registered confidential client `tutti-e2e`.
//
// Prints one line when ready: {"issuer": …, "resource": …, "mcp": …, "port": …}.
// Exits when stdin closes (the test that started it ended).

import http from 'node:http';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

// stdout carries only the ready line (the test stops reading it then): oidc-provider's own
// notices go to stderr.
console.info = (...args) => console.error(...args);
console.warn = (...args) => console.error(...args);

// oidc-provider is installed by scripts/install-test-tools into .tools/npm (TUTTI_NPM_DIR
// overrides where).
const npmDir = process.env.TUTTI_NPM_DIR
  ?? fileURLToPath(new URL('../../.tools/npm', import.meta.url));
const { default: Provider, errors } = await import(
  pathToFileURL(join(npmDir, 'node_modules', 'oidc-provider', 'lib', 'index.js')).href
);

const { values: opts } = parseArgs({
  options: {
    upstream: { type: 'string' },
    ttl: { type: 'string', default: '8' },
    'wrong-issuer': { type: 'boolean', default: false },
    'bare-origin': { type: 'boolean', default: false },
    'last-authorization': { type: 'boolean', default: false },
    'resource-scopes-only': { type: 'boolean', default: false },
    par: { type: 'boolean', default: false },
    'metadata-override': { type: 'string' },
    endless: { type: 'string' },
  },
});
if (!opts.upstream) {
  console.error('provider.mjs: --upstream http://127.0.0.1:PORT/mcp is required');
  process.exit(2);
}
const ttl = Number.parseInt(opts.ttl, 10);
const upstream = new URL(opts.upstream);
const SCOPES = ['mcp:tools', 'mcp:admin'];

const events = [];
const record = (event) => {
  events.push({ at: Date.now(), ...event });
};

async function listen(server) {
  await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
  return server.address().port;
}

// --- the authorization server ---
const asServer = http.createServer();
const asPort = await listen(asServer);
const asUrl = `http://127.0.0.1:${asPort}`;
const resourceServer = http.createServer();
const resourcePort = await listen(resourceServer);
// The resource identifier: the origin, with its `/` path, or as a bare origin (--bare-origin).
const resourceId = `http://127.0.0.1:${resourcePort}${opts['bare-origin'] ? '' : '/'}`;
const mcpUrl = `http://127.0.0.1:${resourcePort}/mcp`;
const metadataUrl = `http://127.0.0.1:${resourcePort}/.well-known/oauth-protected-resource/mcp`;

// A pre-registered confidential client `tutti-e2e` when E2E_CLIENT_SECRET holds its secret
// (from the environment, never argv): a native client, so any loopback port may redirect.
const clientSecret = process.env.E2E_CLIENT_SECRET;
const clients = clientSecret ? [{
  client_id: 'tutti-e2e',
  client_secret: clientSecret,
  application_type: 'native',
  redirect_uris: ['http://127.0.0.1/callback'],
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
}] : [];

const provider = new Provider(opts['wrong-issuer'] ? `${asUrl}/elsewhere` : asUrl, {
  clients,
  cookies: { keys: ['tutti-e2e-only-cookie-key'] },
  findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    pushedAuthorizationRequests: { enabled: opts.par },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: (_ctx, _client, oneOf) => oneOf ?? resourceId,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, indicator) => {
        if (indicator !== resourceId) {
          throw new errors.InvalidTarget(`unknown resource ${indicator}`);
        }
        return {
          scope: SCOPES.join(' '),
          audience: resourceId,
          accessTokenTTL: ttl,
          accessTokenFormat: 'opaque',
        };
      },
    },
  },
  scopes: ['openid', 'offline_access', ...(opts['resource-scopes-only'] ? [] : SCOPES)],
  pkce: { required: () => true },
  issueRefreshToken: (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  rotateRefreshToken: true,
  ttl: { AccessToken: ttl, RefreshToken: 3600, Grant: 3600, Interaction: 600, Session: 3600 },
});
provider.proxy = false;

// What the authorization server saw: endpoint, outcome, and for the token endpoint the grant
// type and resource (no token, code or secret).
provider.use(async (ctx, next) => {
  await next();
  const route = ctx.oidc?.route;
  if (!route || route === 'interaction' || route === 'submit') {
    return;
  }
  const params = ctx.oidc.params ?? {};
  record({
    server: 'as',
    route,
    status: ctx.status,
    grantType: params.grant_type,
    resource: params.resource,
    scope: ['authorization', 'pushed_authorization_request'].includes(route)
      ? params.scope : undefined,
    hint: route === 'revocation' ? params.token_type_hint : undefined,
  });
});

const grants = new Set();
const accessTokens = new Set();
// Every secret value issued (opaque tokens and codes are their ids), for /control/issued.
const issued = { codes: [], accessTokens: [], refreshTokens: [], clientSecrets: [] };
if (clientSecret) {
  issued.clientSecrets.push(clientSecret);
}
// --metadata-override: the discovery documents carry the hostile fields.
const overrides = JSON.parse(
  (opts['metadata-override'] ?? '{}').replaceAll('RESOURCE_PORT', String(resourcePort)),
);
provider.use(async (ctx, next) => {
  await next();
  if (ctx.oidc?.route === 'discovery' && ctx.body && typeof ctx.body === 'object') {
    ctx.body = { ...ctx.body, ...overrides };
  }
});

// --endless: 1.5 GB in 64 KiB chunks, written as fast as the client reads them.
async function endless(req, res, route) {
  res.writeHead(200, { 'content-type': 'application/json' });
  const chunk = Buffer.alloc(64 * 1024, 0x20);
  chunk[0] = 0x7b;
  let sent = 0;
  let closed = false;
  res.on('close', () => { closed = true; });
  while (!closed && sent < 1536 * 1024 * 1024) {
    sent += chunk.length;
    if (!res.write(chunk)) {
      await new Promise((resolve) => { res.once('drain', resolve); res.once('close', resolve); });
    }
  }
  record({ server: 'endless', route, sent });
  res.end();
}

provider.on('access_token.saved', (token) => {
  grants.add(token.grantId);
  accessTokens.add(token.jti);
  issued.accessTokens.push(token.jti);
});
provider.on('refresh_token.saved', (token) => {
  grants.add(token.grantId);
  issued.refreshTokens.push(token.jti);
});
provider.on('authorization_code.saved', (code) => issued.codes.push(code.jti));
provider.on('registration_create.success', (_ctx, client) => {
  if (client.clientSecret) {
    issued.clientSecrets.push(client.clientSecret);
  }
});
provider.on('server_error', (_ctx, err) => console.error('provider.mjs: server error', err));

const providerCallback = provider.callback();
let tokenRequests = 0;
asServer.on('request', (req, res) => {
  const path = new URL(req.url ?? '/', asUrl).pathname;
  const token = path === '/token' && req.method === 'POST';
  tokenRequests += token ? 1 : 0;
  if ((opts.endless === 'token' && token)
    || (opts.endless === 'refresh' && token && tokenRequests > 1)
    || (opts.endless === 'metadata' && path.startsWith('/.well-known/'))) {
    endless(req, res, opts.endless).catch((e) => console.error('provider.mjs: endless', e));
    return;
  }
  providerCallback(req, res);
});

// --- the protected resource ---
const required = new Map();

function challenge(res, status, extra) {
  const parts = [`resource_metadata="${metadataUrl}"`, ...extra];
  res.writeHead(status, {
    'www-authenticate': `Bearer ${parts.join(', ')}`,
    'content-type': 'application/json',
  });
  res.end(JSON.stringify({ error: status === 401 ? 'invalid_token' : 'insufficient_scope' }));
}

async function tokenOf(req) {
  const sent = req.headersDistinct.authorization?.length ?? 0;
  if (sent > 1) {
    record({ server: 'resource', authorizationHeaders: sent });
  }
  const header = (opts['last-authorization']
    ? req.headersDistinct.authorization?.at(-1)
    : req.headers.authorization) ?? '';
  if (!header.startsWith('Bearer ')) {
    return { problem: 'no token' };
  }
  const token = await provider.AccessToken.find(header.slice(7).trim());
  if (!token) {
    return { problem: 'unknown, expired or revoked token' };
  }
  const audience = [token.aud].flat();
  if (!audience.includes(resourceId)) {
    return { problem: 'wrong audience' };
  }
  return { scopes: new Set((token.scope ?? '').split(' ').filter(Boolean)) };
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function neededScope(body) {
  try {
    const msg = JSON.parse(body.toString('utf8'));
    if (msg?.method === 'tools/call') {
      return required.get(msg.params?.name);
    }
  } catch {
    // not JSON: nothing more to require
  }
  return undefined;
}

function forward(req, res, body) {
  const headers = { ...req.headers, host: upstream.host };
  delete headers.authorization;
  const out = http.request({
    host: upstream.hostname,
    port: upstream.port,
    method: req.method,
    path: upstream.pathname,
    headers,
  }, (answer) => {
    res.writeHead(answer.statusCode ?? 502, answer.headers);
    answer.pipe(res);
  });
  out.on('error', (e) => {
    res.writeHead(502, { 'content-type': 'text/plain' });
    res.end(`provider.mjs: upstream: ${e.message}\n`);
  });
  out.end(body);
}

let echoHeaders = false;

async function serveMcp(req, res) {
  const body = await readBody(req);
  if (echoHeaders && body.includes('"tools/call"')) {
    echoHeaders = false;
    record({ server: 'resource', status: 500, echoed: true });
    res.writeHead(500, { 'content-type': 'text/html' });
    res.end(`<html><body><h1>Internal error</h1><pre>${JSON.stringify(req.headersDistinct)}</pre></body></html>`);
    return;
  }
  const verdict = await tokenOf(req);
  if (verdict.problem) {
    record({ server: 'resource', status: 401, problem: verdict.problem });
    const extra = verdict.problem === 'no token' ? [] : ['error="invalid_token"'];
    challenge(res, 401, extra);
    return;
  }
  const scope = neededScope(body);
  if (scope && !verdict.scopes.has(scope)) {
    record({ server: 'resource', status: 403, scope });
    challenge(res, 403, ['error="insufficient_scope"', `scope="${scope}"`]);
    return;
  }
  forward(req, res, body);
}

function json(res, status, value) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(value));
}

async function revokeAll() {
  for (const grantId of grants) {
    await provider.AccessToken.revokeByGrantId(grantId);
    await provider.RefreshToken.revokeByGrantId(grantId);
    await provider.Grant.adapter.destroy(grantId);
  }
  record({ server: 'control', revoked: grants.size });
  grants.clear();
}

async function serveResource(req, res) {
  const path = new URL(req.url ?? '/', mcpUrl).pathname;
  if (path === '/.well-known/oauth-protected-resource'
    || path === '/.well-known/oauth-protected-resource/mcp') {
    record({ server: 'resource', route: 'metadata' });
    json(res, 200, {
      resource: resourceId,
      authorization_servers: [asUrl],
      scopes_supported: ['mcp:tools'],
      bearer_methods_supported: ['header'],
    });
  } else if (path.startsWith('/trap/')) {
    record({ server: 'trap', path, method: req.method });
    json(res, 200, {});
  } else if (path === '/mcp') {
    await serveMcp(req, res);
  } else if (path === '/control/revoke' && req.method === 'POST') {
    await revokeAll();
    json(res, 200, { ok: true });
  } else if (path === '/control/drop-access-tokens' && req.method === 'POST') {
    // One by one: revoking by grant would drop the grant's refresh tokens too.
    for (const jti of accessTokens) {
      await provider.AccessToken.adapter.destroy(jti);
    }
    record({ server: 'control', dropped: accessTokens.size });
    accessTokens.clear();
    json(res, 200, { ok: true });
  } else if (path === '/control/require-scope' && req.method === 'POST') {
    const order = JSON.parse((await readBody(req)).toString('utf8'));
    required.set(order.tool, order.scope);
    json(res, 200, { ok: true });
  } else if (path === '/control/echo-headers' && req.method === 'POST') {
    echoHeaders = true;
    json(res, 200, { ok: true });
  } else if (path === '/control/issued') {
    json(res, 200, issued);
  } else if (path === '/control/log') {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.end(events.map((e) => `${JSON.stringify(e)}\n`).join(''));
  } else {
    json(res, 404, { error: 'not found' });
  }
}

resourceServer.on('request', (req, res) => {
  serveResource(req, res).catch((e) => {
    console.error('provider.mjs: resource error', e);
    if (!res.headersSent) {
      json(res, 500, { error: String(e) });
    }
  });
});

console.log(JSON.stringify({
  issuer: asUrl, resource: resourceId, mcp: mcpUrl, port: asPort, resourcePort,
}));
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
