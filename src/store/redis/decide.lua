-- floodgate: apply one decision (every limit of one SMTP event) atomically.
--
-- This is a transcription of src/store/eval.rs, src/store/memory.rs
-- (decide_many) and src/limit/{ewma,gcra,bucket}.rs. Lua numbers are IEEE
-- doubles, so keeping Rust's operation order gives bit-identical rates.
--
-- Built for speed (see encode.rs for the byte layouts): parameters arrive
-- packed as little-endian doubles, records are single strings of packed
-- doubles (read with one MGET, written with SET .. PX), and the reply is one
-- packed string, so no number is ever formatted or parsed as text.
--
-- KEYS: the record key of every limit, then the set key of every unique
--   limit (in limit order).
-- ARGV[1]: the packed decision; ARGV[2]: idle TTL in milliseconds (text);
--   ARGV[3..]: the unique values, one per unique limit (in limit order).
-- Reply: one string: refused (byte), then per limit
--   flags (byte: 1 over, 2 stored, 4 seen known, 8 seen, 16 extra known),
--   value (double), extra (double: EWMA base rate for the retry time, GCRA
--   retry ns, bucket retry ms).

local MAX_EXACT = 65536

local blob = ARGV[1]
local explicit, now_s, now_u, n, pos = struct.unpack('<Bddd', blob)
explicit = explicit == 1
if not explicit then
  local t = redis.call('TIME')
  now_s = tonumber(t[1]); now_u = tonumber(t[2])
end
local idle_ms = ARGV[2]

-- Parse the limits. Codes: algo 1 EWMA, 2 GCRA, 3 bucket; EWMA mode
-- 0 leaky, 1 strict, 2 readonly; unique 0 none, 1 Bloom, 2 exact; bucket op
-- 0 check, 1 commit, 2 cancel; verdict 0 other, 1 ham, 2 spam.
local reqs = {}
local nu = 0
local any_ewma, any_gcra, any_bucket = false, false, false
for i = 1, n do
  local algo, blocking, count
  algo, blocking, count, pos = struct.unpack('<BBd', blob, pos)
  -- Table constructors size each table once (adding fields one by one
  -- would rehash it several times).
  local r
  if algo == 1 then
    local limit, period, mode, uflag, h1, h2, bsize
    limit, period, mode, uflag, h1, h2, bsize, pos = struct.unpack('<ddBBddd', blob, pos)
    local skey, value = false, false
    if uflag ~= 0 then
      nu = nu + 1
      skey = KEYS[n + nu]; value = ARGV[2 + nu]
    end
    r = { algo = 1, blocking = blocking == 1, count = count, key = KEYS[i],
          limit = limit, period = period, mode = mode, uflag = uflag,
          h1 = h1, h2 = h2, bsize = bsize, skey = skey, value = value,
          flags = 0, value_out = 0, extra = 0 }
    any_ewma = true
  elseif algo == 2 then
    local t, tau, inc
    t, tau, inc, pos = struct.unpack('<ddd', blob, pos)
    r = { algo = 2, blocking = blocking == 1, count = count, key = KEYS[i],
          t = t, tau = tau, inc = inc, flags = 0, value_out = 0, extra = 0 }
    any_gcra = true
  else
    local burst, per_second, op, verdict, dyn, hfr, sfr, hfb, sfb, maxr, maxb
    burst, per_second, op, verdict, dyn, hfr, sfr, hfb, sfb, maxr, maxb, pos =
      struct.unpack('<ddBBBdddddd', blob, pos)
    r = { algo = 3, blocking = blocking == 1, count = count, key = KEYS[i],
          burst = burst, per_second = per_second, op = op, verdict = verdict,
          dyn = dyn == 1, hfr = hfr, sfr = sfr, hfb = hfb, sfb = sfb,
          maxr = maxr, maxb = maxb, flags = 0, value_out = 0, extra = 0 }
    any_bucket = true
  end
  reqs[i] = r
end

-- Every record in one read (a key that holds no string reads as nil, so a
-- record in an older layout counts as absent and is replaced on write).
local raw = {}
local got = redis.call('MGET', unpack(KEYS, 1, n))
for i = 1, n do raw[KEYS[i]] = got[i] end

-- ---------------------------------------------------------------- state cache
-- Records are decoded once per pass and kept in `cache`; writes go to the
-- cache and are flushed only after the decision is settled. A state table
-- has every field of its layout from the start (one allocation); the
-- unique-set buffers `bits` and `members` are made when first needed.
local cache

-- Record layouts (packed little-endian doubles), by algorithm.
local E_FMT, U_FMT, G_FMT, B_FMT = '<ddd', '<dddddd', '<dd', '<ddddd'

local function load(r)
  local st = cache[r.key]
  if st ~= nil then return st end
  local v = raw[r.key]
  local len = v and #v or 0
  if r.algo == 1 then
    st = { exists = false, dirty = false, ts = 0, tu = 0, rate = 0, cr = 0, k = 0, n = 0,
           bits = false, members = false, added = 0, reset = false }
    if r.uflag == 0 then
      if len == 24 then
        st.exists = true
        st.ts, st.tu, st.rate = struct.unpack(E_FMT, v)
      end
    elseif len == 48 then
      st.exists = true
      st.ts, st.tu, st.rate, st.cr, st.k, st.n = struct.unpack(U_FMT, v)
    end
  elseif r.algo == 2 then
    st = { exists = false, dirty = false, s = 0, n = 0, ttl_ms = 0 }
    if len == 16 then
      st.exists = true
      st.s, st.n = struct.unpack(G_FMT, v)
    end
  else
    st = { exists = false, dirty = false, l = 0, b = 0, p = 0, dr = 0, db = 0 }
    if len == 40 then
      st.exists = true
      st.l, st.b, st.p, st.dr, st.db = struct.unpack(B_FMT, v)
    end
  end
  cache[r.key] = st
  return st
end

-- Each evaluator returns value, over, stored, seen (-1 not applicable, 0,
-- 1) and extra (nil: none). Closures cost time to create on every call, so
-- only the algorithms the decision uses get theirs.

-- ---------------------------------------------------------------- EWMA
local eval_ewma
if any_ewma then
  local function next_rate(has, ps, pu, prate, count, period)
    if not has then return count end
    local interval = (now_s + now_u / 1000000.0) - (ps + pu / 1000000.0)
    if interval <= 0.0 then interval = 1e-9 end
    local i_over_p = interval / period
    local a = math.exp(-i_over_p)
    local rate = (1.0 - a) * count / i_over_p + a * prate
    if rate < count then rate = count end
    return rate
  end

  -- Unique sets. Kinds as stored: 1 Bloom, 2 exact.
  local set_contains, set_insert
  if nu > 0 then
    -- Bloom probe offsets as Redis bit offsets (MSB first within a byte).
    local function probes(r, size)
      local out = {}
      local h = r.h1
      for i = 1, 8 do
        local byte = math.floor(h / 8) % size
        local bit = h % 8
        out[i] = byte * 8 + (7 - bit)
        h = (h + r.h2) % 4294967296
      end
      return out
    end

    set_contains = function(r, st, kind, size)
      if kind == 1 then
        for _, off in ipairs(probes(r, size)) do
          local set = st.bits and st.bits[off]
          if not set then
            set = (not st.reset) and redis.call('GETBIT', r.skey, off) == 1
          end
          if not set then return false end
        end
        return true
      end
      if st.members and st.members[r.value] then return true end
      if st.reset then return false end
      return redis.call('SISMEMBER', r.skey, r.value) == 1
    end

    set_insert = function(r, st, kind, size)
      if kind == 1 then
        if not st.bits then st.bits = {} end
        for _, off in ipairs(probes(r, size)) do st.bits[off] = true end
        return
      end
      if set_contains(r, st, kind, size) then return end
      local len = st.added
      if not st.reset then len = len + redis.call('SCARD', r.skey) end
      if len < MAX_EXACT then
        if not st.members then st.members = {} end
        st.members[r.value] = true
        st.added = st.added + 1
      end
    end
  end

  eval_ewma = function(r, suppress)
    local st = load(r)
    local readonly = r.mode == 2
    local has = st.exists
    local ps, pu, prate = 0, 0, 0
    if has then ps = st.ts; pu = st.tu; prate = st.rate end
    local count = r.count
    local seen = -1
    local kind, size, newset = nil, nil, false
    if r.uflag ~= 0 then
      local keep = has and not (now_s > st.cr + r.period)
      if keep then
        kind = st.k; size = st.n
      else
        kind = r.uflag; size = r.bsize; newset = true
      end
      if not readonly then
        local hit
        if newset then hit = false else hit = set_contains(r, st, kind, size) end
        if hit then seen = 1; count = 0.0 else seen = 0 end
      end
    end
    local ecount = count
    if readonly then ecount = 0.0 end
    local rate = next_rate(has, ps, pu, prate, ecount, r.period)
    local over = not (rate < r.limit)
    local store
    if r.mode == 1 then store = true
    elseif r.mode == 2 then store = false
    else store = (not over) and not suppress end
    local base
    if not over then
      base = nil
    elseif store then
      base = rate
    elseif has then
      base = next_rate(true, ps, pu, prate, 0.0, r.period)
    else
      base = 0.0
    end
    if store then
      st.exists = true; st.dirty = true
      st.ts = now_s; st.tu = now_u; st.rate = rate
      if r.uflag ~= 0 then
        if newset then
          st.reset = true; st.bits = false; st.members = false; st.added = 0
          st.cr = now_s; st.k = kind; st.n = size
        end
        if not readonly then set_insert(r, st, kind, size) end
      end
    end
    return rate, over, store, seen, base
  end
end

-- ---------------------------------------------------------------- GCRA
-- TAT is kept as whole seconds `s` plus nanoseconds `n`, so that every
-- quantity the script computes (differences to now) is an exact integer.
local eval_gcra
if any_gcra then
  eval_gcra = function(r, suppress)
    local st = load(r)
    local now_n = now_u * 1000
    local d = 0
    if st.exists then
      d = (st.s - now_s) * 1000000000 + (st.n - now_n)
      if d < 0 then d = 0 end
    end
    local nd = d + r.inc
    local level = nd / r.t
    local over = nd - r.tau > 0
    local retry
    if not over then retry = 0
    elseif r.inc > r.tau then retry = nil
    else retry = nd - r.tau end
    local store = (not over) and not suppress
    if store then
      local total = now_n + nd
      local carry = math.floor(total / 1000000000)
      st.exists = true; st.dirty = true
      st.s = now_s + carry; st.n = total - carry * 1000000000
      st.ttl_ms = math.floor(nd / 1000000) + 1000
    end
    return level, over, store, -1, retry
  end
end

-- ---------------------------------------------------------------- bucket
local eval_bucket
if any_bucket then
  local function step_mult(cur, factor, max)
    if max <= 1.0 then return cur end
    local x = cur / 10000.0
    if (factor > 1.0 and x < max) or (factor < 1.0 and x > 1.0 / max) then
      x = x * factor
    end
    local v = math.floor(x * 10000.0)
    if v < 1 then v = 1 end
    return v
  end

  eval_bucket = function(r, suppress)
    local st = load(r)
    local now_ms = (now_s * 1000000 + now_u) / 1000.0
    local n = r.count
    if n < 1.0 then n = 1.0 end
    local prev = nil
    if st.exists then
      prev = { l = st.l, b = st.b, p = st.p, dr = st.dr, db = st.db }
    end
    local nx, level, over, retry
    if r.op == 0 then
      if prev == nil then
        nx = { l = now_ms, b = 0.0, p = n, dr = 10000, db = 10000 }
        level = 0.0; over = false; retry = 0.0
      else
        nx = { l = prev.l, b = prev.b, p = prev.p, dr = prev.dr, db = prev.db }
        if nx.b < 0.0 then nx.b = 0.0 end
        if nx.p < 0.0 then nx.p = 0.0 end
        local leak = r.per_second / 1000.0
        if r.dyn then
          local m = nx.dr / 10000.0
          if m == 0.0 then m = 0.0001 end
          leak = leak * m
        end
        if nx.b > 0.0 and nx.l < now_ms then
          local leaked = (now_ms - nx.l) * leak
          if leaked > nx.b then leaked = nx.b end
          nx.b = nx.b - leaked
          nx.l = now_ms
        end
        local cap = r.burst
        if r.dyn then cap = r.burst * nx.db / 10000.0 end
        if cap < 1.0 then cap = 1.0 end
        local total = nx.p + n
        level = nx.b
        if nx.b + total > cap then
          over = true
          local excess = nx.b + total - cap
          if total <= cap and leak > 0.0 then retry = excess / leak else retry = nil end
        else
          over = false
          nx.p = nx.p + n
          retry = 0.0
        end
      end
    elseif r.op == 1 then
      nx = prev or { l = now_ms, b = 0.0, p = n, dr = 10000, db = 10000 }
      if r.dyn then
        local fr, fb = 1.0, 1.0
        if r.verdict == 1 then fr = r.hfr; fb = r.hfb
        elseif r.verdict == 2 then fr = r.sfr; fb = r.sfb end
        nx.dr = step_mult(nx.dr, fr, r.maxr)
        nx.db = step_mult(nx.db, fb, r.maxb)
      end
      if nx.b < 0.0 then nx.b = n else nx.b = nx.b + n end
      nx.p = nx.p - n
      if nx.p < 0.0 then nx.p = 0.0 end
      nx.l = now_ms
      level = nx.b; over = false; retry = 0.0
    else
      nx = prev or { l = now_ms, b = 0.0, p = 0.0, dr = 10000, db = 10000 }
      nx.p = nx.p - n
      if nx.p < 0.0 then nx.p = 0.0 end
      nx.l = now_ms
      level = nx.b; over = false; retry = 0.0
    end
    local write = nx
    if r.op == 0 and suppress and not over then
      if prev == nil then
        write = nil
      else
        local p = nx.p - n
        if p < 0.0 then p = 0.0 end
        write = { l = nx.l, b = nx.b, p = p, dr = nx.dr, db = nx.db }
      end
    end
    if write ~= nil then
      st.exists = true; st.dirty = true
      st.l = write.l; st.b = write.b; st.p = write.p; st.dr = write.dr; st.db = write.db
    end
    return level, over, write ~= nil, -1, retry
  end
end

-- ---------------------------------------------------------------- decision
-- Evaluates every limit (with writes suppressed after a refusal) and keeps
-- each limit's reply fields in its request table.
local function pass(suppress)
  cache = {}
  local refused = false
  for i = 1, n do
    local r = reqs[i]
    local value, over, stored, seen, extra
    if r.algo == 1 then value, over, stored, seen, extra = eval_ewma(r, suppress)
    elseif r.algo == 2 then value, over, stored, seen, extra = eval_gcra(r, suppress)
    else value, over, stored, seen, extra = eval_bucket(r, suppress) end
    if over and r.blocking then refused = true end
    local flags = 0
    if over then flags = 1 end
    if stored then flags = flags + 2 end
    if seen >= 0 then flags = flags + 4 + 8 * seen end
    if extra ~= nil then flags = flags + 16 else extra = 0.0 end
    r.flags = flags; r.value_out = value; r.extra = extra
  end
  return refused
end

local refused = pass(false)
if refused then
  pass(true)
end

-- Flush every written record with its TTL.
local reply = refused and '\1' or '\0'
for i = 1, n do
  local r = reqs[i]
  reply = reply .. struct.pack('<Bdd', r.flags, r.value_out, r.extra)
  local st = cache[r.key]
  if st.dirty then
    st.dirty = false
    if r.algo == 1 then
      if r.uflag == 0 then
        redis.call('SET', r.key, struct.pack(E_FMT, st.ts, st.tu, st.rate), 'PX', idle_ms)
      else
        redis.call('SET', r.key,
          struct.pack(U_FMT, st.ts, st.tu, st.rate, st.cr, st.k, st.n), 'PX', idle_ms)
        if st.reset then
          redis.call('DEL', r.skey)
          if st.k == 1 then redis.call('SETRANGE', r.skey, st.n - 1, '\0') end
        end
        if st.k == 1 then
          if st.bits then
            for off, _ in pairs(st.bits) do redis.call('SETBIT', r.skey, off, 1) end
          end
        elseif st.members then
          for m, _ in pairs(st.members) do redis.call('SADD', r.skey, m) end
        end
        st.reset = false; st.bits = false; st.members = false; st.added = 0
        if redis.call('EXISTS', r.skey) == 1 then redis.call('PEXPIRE', r.skey, idle_ms) end
      end
    elseif r.algo == 2 then
      -- A TAT in the past is exactly a new key, so the key can go then;
      -- with an explicit (simulated) time the server clock is unrelated.
      local ttl = idle_ms
      if not explicit then ttl = st.ttl_ms end
      redis.call('SET', r.key, struct.pack(G_FMT, st.s, st.n), 'PX', ttl)
    else
      redis.call('SET', r.key, struct.pack(B_FMT, st.l, st.b, st.p, st.dr, st.db),
        'PX', idle_ms)
    end
  end
end

return reply
