-- Run once on every new fencelock session (pg_connection.h, open_connection), before anything
-- else: pins the session settings its calls depend on and marks the session.
-- $1 JSON object {setting: value} of settings to pin for the session: the timeouts a role or
--    database setting could shorten, the server's side of the TCP keepalives. Only those the
--    server has are set (transaction_timeout exists from PostgreSQL 17 on).
-- $2 true to raise synchronous_commit to on where it is off or local (durable tokens)
-- $3 the session's mark ('' for none), kept in the custom setting fencelock.session
-- Returns the mark the session had before ('' or NULL for none): a new session of its own has
-- none, one handed on by a pooler may.
WITH previous AS MATERIALIZED (
  SELECT coalesce(current_setting('fencelock.session', true), '') AS mark
), pinned AS MATERIALIZED (
  SELECT set_config(s.name, v.value, false)
    FROM json_each_text($1::json) AS v(name, value) JOIN pg_settings s ON s.name = v.name
), durable AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'on', false)
   WHERE $2::bool AND current_setting('synchronous_commit') IN ('off', 'local')
)
SELECT p.mark, (SELECT count(*) FROM pinned), (SELECT count(*) FROM durable),
       CASE WHEN $3 <> '' THEN set_config('fencelock.session', $3, false) END
  FROM previous p
