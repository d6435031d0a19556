// Package auth decides who may do what on the ledger's HTTP interface:
// bearer tokens, each with a name, one [Role] and optionally a list of the
// runs it is limited to.
//
// # Roles
//
//   - [Producer] appends the facts of the rollout side: the scheduler's
//     (run.started, task.registered, group.started, group.closed), the
//     rollout workers' (attempt.*, turn.generated, tool.called,
//     context.compacted) and the verifier's (reward.computed). It may read a
//     task's admission, which a scheduler acts on.
//   - [Trainer] appends policy.published and gradient.applied and reads
//     batches: the long poll, a batch's manifest and its samples.
//   - [Reader] reads everything (every GET) and writes nothing.
//   - [Admin] may do everything.
//
// [FactRoles] is the table; a fact type outside it is writable by admins
// only, so a new type is closed until someone decides who writes it.
//
// # Tokens
//
// A token is known by the SHA-256 of its bytes: a token file may hold the
// token itself or only its hash. A request's token is hashed and compared
// with every known hash in constant time, so neither the time taken nor the
// token's length tells an attacker how close a guess was. Tokens are never
// logged; their names are.
//
// # Where it is checked
//
// Every HTTP route is registered on a [Router], which wraps each route's
// handler in the check; a route cannot be added without it. The check runs
// after the router matched the request, on what it matched: the route's
// pattern decides the access needed ([Classify]), and for a route that
// names a run, the routed {run} — the value the handler itself reads — is
// held against the token's scope. Nothing parses the request's path a
// second time: a second parser would disagree with the router about
// encoded paths ("/v1/%72uns/...") and let a scoped token read another
// run. A route that names a run other than as {run} cannot be registered.
//
// The router answers 401 to a request without a known token and 403 to one
// whose role may not use the route or whose run is out of the token's
// scope, and logs each refusal ([LogRefused]); GET /healthz and GET
// /metrics stay open. A request no route matches is authenticated too,
// then answered 405 with Allow or 404. Appends are decided per event after
// decoding ([Principal.AuthorizeEvents]), all or nothing: one event the
// token may not write refuses the request, naming the event and the field
// (type or run).
package auth
