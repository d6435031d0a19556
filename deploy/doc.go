// Package deploy holds the configuration of the production-shaped stack that
// docker-compose.yml starts: the OpenTelemetry Collector's pipeline, the
// Prometheus scrape configuration and alert rules, Grafana's provisioned
// data sources and dashboards, and Postgres' first-start script. It has no Go code to import; its tests check the files: that
// Prometheus and Grafana will load them, that every query names only metrics
// the services expose, that the Dockerfile passes BuildKit's lint rules, and
// that every dashboard's SQL runs, read-only, against the migrated schema and
// returns rows for a simulated run. docs/operations.md is the manual.
package deploy
