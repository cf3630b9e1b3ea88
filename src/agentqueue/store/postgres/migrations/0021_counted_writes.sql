-- The metrics of the hot set-wise writes counted in their own statements.
--
-- aq_metrics_rollup (0012) counts every change of state from the events a statement inserted:
-- per event a primary-key probe of aq_tasks (for its type, agent and times), for a claim a probe
-- of the task's earlier events (is it the first start?), then an upsert of the sums. For the
-- statements that write most events (claim, complete, admit, admit_ids: a batch each) that was
-- a fifth of the server's CPU per task of a drain (PostgreSQL 15, 2 cores: 124 us per task with
-- it, 101 us with the trigger doing nothing). Those statements now count their own events from
-- the rows they updated, where type, agent and times are at hand and the first start is the
-- claimed row's started_at being NULL (only a claim sets it, and nothing clears it), in one
-- upsert of the same rows the trigger would write; and they mark it, for the trigger that fires
-- as each ends: a transaction-local setting, agentqueue.counted = 'on', set in the statement's
-- last step, which the trigger clears and returns on. A statement that updated no row may
-- leave no mark (whether its last step runs at all is the planner's choice): the trigger then
-- counts its events, of which there are none. Every other write of events is counted by the
-- trigger as before. tests/scheduler/test_counted_writes.py holds both ways to the same counts.
CREATE OR REPLACE FUNCTION aq_metrics_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('agentqueue.counted', true) = 'on' THEN
        -- The statement counted its own events (see above); the mark is its alone.
        PERFORM set_config('agentqueue.counted', '', true);
        RETURN NULL;
    END IF;
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT pg_backend_pid()::text, e.tenant, t.task_type, coalesce(t.agent, ''), x.metric,
           x.label, count(*), sum(x.v)
    FROM (
        SELECT ne.task_id, ne.seq, ne.tenant, ne.at, ne.from_state, ne.to_state, ne.action,
               -- The data is parsed only where it tells something (not for claims and
               -- completions, the bulk of the rows).
               CASE WHEN ne.to_state = 'dead_letter' OR ne.action = 'lease_expired'
                    THEN (ne.data ->> 'timeout') = 'true' ELSE false END AS timed_out,
               CASE WHEN ne.to_state IN ('retrying', 'queued')
                    THEN (ne.data ->> 'retry') IS NOT NULL ELSE false END AS retried
        FROM aq_new_events ne
        -- Only the events something is counted for (the others are most of a busy queue's).
        WHERE ne.action IN ('claim', 'lease_expired')
           OR ne.to_state IN ('completed', 'failed', 'dead_letter', 'cancelled', 'retrying')
           OR (ne.from_state = 'waiting_tool' AND ne.to_state = 'queued')
    ) e
    -- Lateral: one primary-key probe per event, whatever the planner guesses of the
    -- transition table's size (it has no statistics).
    CROSS JOIN LATERAL (
        SELECT task_type, agent, created_at, started_at FROM aq_tasks WHERE id = e.task_id
    ) t
    CROSS JOIN LATERAL (
        SELECT 'ended' AS metric,
               CASE WHEN e.to_state = 'dead_letter' AND e.timed_out
                    THEN 'timeout' ELSE e.to_state END AS label,
               0::double precision AS v
        WHERE e.to_state IN ('completed', 'failed', 'dead_letter', 'cancelled')
        UNION ALL
        SELECT 'completion', aq_metric_bucket(s.v), s.v
        FROM (SELECT extract(epoch FROM e.at - t.started_at)::double precision AS v) s
        WHERE e.to_state IN ('completed', 'failed', 'dead_letter', 'cancelled')
          AND t.started_at IS NOT NULL
        UNION ALL
        SELECT 'latency', aq_metric_bucket(s.v), s.v
        FROM (SELECT extract(epoch FROM e.at - t.created_at)::double precision AS v) s
        WHERE e.action = 'claim'
          AND NOT EXISTS (SELECT 1 FROM aq_events p
                          WHERE p.task_id = e.task_id AND p.seq < e.seq AND p.action = 'claim')
        UNION ALL
        SELECT 'retry', '', 0 WHERE e.retried
        UNION ALL
        SELECT 'lapse', CASE WHEN e.timed_out THEN 'timeout' ELSE 'heartbeat' END, 0
        WHERE e.action = 'lease_expired'
    ) x
    GROUP BY e.tenant, t.task_type, t.agent, x.metric, x.label
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n, total = m.total + EXCLUDED.total;
    -- Depth: every change of state moves one task out of one live state and into another.
    INSERT INTO aq_metric_counts AS m (writer, tenant, task_type, agent, metric, label, n, total)
    SELECT pg_backend_pid()::text, ne.tenant, '', '', 'depth', d.state, sum(d.delta), 0
    FROM aq_new_events ne
    CROSS JOIN LATERAL (VALUES (ne.to_state, 1), (ne.from_state, -1)) AS d(state, delta)
    WHERE ne.from_state IS DISTINCT FROM ne.to_state
      AND d.state IN ('pending', 'blocked', 'queued', 'executing', 'waiting_tool', 'retrying',
                      'dead_letter', 'manual_review')
    GROUP BY ne.tenant, d.state
    HAVING sum(d.delta) <> 0
    ON CONFLICT (writer, tenant, task_type, agent, metric, label)
    DO UPDATE SET n = m.n + EXCLUDED.n;
    RETURN NULL;
END
$$;
