package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// mgmtGet decodes GET path of the management API at base into v.
func mgmtGet(t *testing.T, ctx context.Context, base, path string, v any) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("management URL %q: %v", base, err)
	}
	user := u.User
	u.User = nil
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != nil {
		pw, _ := user.Password()
		req.SetBasicAuth(user.Username(), pw)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

func TestRabbitMQ(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := RabbitMQ(t)
	if a := RabbitMQ(t); a != u {
		t.Fatalf("RabbitMQ returned %q, then %q; want one shared server", u, a)
	}
	mgmt := RabbitMQManagement(t)

	name := Name(t)
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	conn, err := amqp.DialConfig(u, amqp.Config{Properties: props})
	if err != nil {
		t.Fatalf("dial %s: %v", redactURL(u), err)
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q := name + ":q"
	if _, err := ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
		t.Fatalf("declare: %v", err)
	}
	if err := ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatalf("publish: %v", err)
	}

	// The management API's queue totals follow within a fraction of a
	// second: brokers count messages with them.
	start := time.Now()
	for {
		var qs struct {
			Items []struct {
				Ready int `json:"messages_ready"`
			} `json:"items"`
		}
		mgmtGet(t, ctx, mgmt, "/api/queues/%2F?disable_stats=true&enable_queue_totals=true&page=1&use_regex=true&name="+
			url.QueryEscape("^"+q+"$"), &qs)
		if len(qs.Items) == 1 && qs.Items[0].Ready == 1 {
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("management API still shows %+v for %q 2s after a publish", qs.Items, q)
		}
		time.Sleep(20 * time.Millisecond) // polling the management API
	}

	// CloseAMQPConnections closes this connection, and only it.
	var n int
	for n == 0 {
		n, err = CloseAMQPConnections(ctx, mgmt, name)
		if err != nil {
			t.Fatalf("CloseAMQPConnections: %v", err)
		}
		if n == 0 && ctx.Err() != nil {
			t.Fatal("the management API never listed the connection")
		}
		if n == 0 {
			time.Sleep(20 * time.Millisecond) // the API lists a connection after a moment
		}
	}
	if n != 1 {
		t.Fatalf("CloseAMQPConnections closed %d connections, want 1", n)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced {
			t.Fatalf("connection closed with %v, want CONNECTION_FORCED", e)
		}
	case <-ctx.Done():
		t.Fatal("the connection was not closed")
	}
	if n, err := CloseAMQPConnections(ctx, mgmt, name+"-other"); err != nil || n != 0 {
		t.Fatalf("CloseAMQPConnections of a name nobody uses = %d, %v; want 0", n, err)
	}
}
