-- Revocation at once: every daemon caches resolved tokens for a few
-- seconds. A token revoked (or deleted), by whatever path, is announced
-- with its hash on `memd_tokens` when the change commits, and every daemon
-- listening drops it from its cache.
CREATE FUNCTION announce_token_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('memd_tokens', encode(OLD.token_hash, 'hex'));
    RETURN NULL;
END
$$;

CREATE TRIGGER api_tokens_revoked
    AFTER UPDATE OF revoked_at ON api_tokens
    FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
    EXECUTE FUNCTION announce_token_change();

CREATE TRIGGER api_tokens_deleted
    AFTER DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION announce_token_change();
