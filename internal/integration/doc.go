// Package integration starts the real servers trawl's backends are tested
// against (Redis, RabbitMQ, NATS) with testcontainers-go. Its subpackage
// integration/crawl runs whole crawls with several trawl processes against
// them: work sharing, kill -9, resume after SIGINT, broker restarts.
//
// It is a package for tests only. Backend tests import it; it imports no
// backend, so there is no cycle.
//
// # Servers
//
// Redis returns the URL of a Redis server and RedisCluster the addresses of
// a three-node Redis Cluster. Each is started at most once per test binary
// and shared by all of its tests; tests keep apart by using their own names
// (see Name). Where TRAWL_TEST_REDIS_URL (or TRAWL_TEST_REDIS_CLUSTER, a
// comma-separated list of node addresses) is set, that server is used and
// nothing is started. Images come from TRAWL_REDIS_IMAGE (default "redis:7").
//
// RabbitMQ (and RabbitMQManagement) and NATS work alike, with
// TRAWL_TEST_AMQP_URL (and TRAWL_TEST_AMQP_MANAGEMENT_URL) and
// TRAWL_TEST_NATS_URL, images from TRAWL_RABBITMQ_IMAGE and
// TRAWL_NATS_IMAGE. RabbitMQContainer and NATSContainer start a server for
// one test alone, on a fixed host port, with a Restart method for the tests
// of a broker that restarts. RabbitMQStock returns a shared one with no
// plugin enabled (no management API), as a stock deployment has it.
//
// RedisContainer, RabbitMQContainer and NATSContainer take options:
// WithTLS(ca) makes the server take TLS connections only, with a
// certificate signed by ca (NewCA: a CA made at test time, its certificate
// and a client certificate in PEM files for --tls-ca, --tls-cert and
// --tls-key; no key is kept); WithPassword makes it want a user and
// password; WithClientCerts (Redis) a client certificate. Their URLs
// (rediss://, amqps:// and https://, tls://) carry the credentials.
//
// A server that cannot be started or reached fails the test with a message
// saying why; it is never skipped in silence. Under -short (make unit) no
// container is started: a test that would need one is skipped, with a
// message naming the variable that points it at a running server instead
// (RabbitMQContainer, RabbitMQStock and NATSContainer always skip under
// -short).
//
// # Cleanup
//
// Shared containers live until the test binary ends. A package that uses
// the helpers must run its tests through Main, which removes them:
//
//	func TestMain(m *testing.M) { integration.Main(m) }
//
// (or through Run, which returns the exit code instead of exiting).
//
// The helpers fail a test whose binary does not do so, because with Ryuk
// disabled (TESTCONTAINERS_RYUK_DISABLED=true, needed where Ryuk's image
// cannot be pulled) nothing else would remove the containers.
//
// # Cluster networking
//
// The cluster's nodes announce their addresses on the Docker bridge network,
// and cluster clients connect to the announced addresses, so the test
// process must reach the containers' bridge IPs. It does on Linux hosts and
// in Linux containers running their own Docker engine; it does not on
// Docker Desktop, where RedisCluster fails with a message saying so.
package integration
