-- floodgate: apply one decision (every limit of one SMTP event) atomically.
--
-- This is a transcription of src/store/eval.rs, src/store/memory.rs
-- (decide_many) and src/limit/{ewma,gcra,bucket}.rs. Lua numbers are IEEE
-- doubles, so keeping Rust's operation order gives bit-identical rates.
--
-- Built for speed (see encode.rs for the byte layouts): parameters arrive
-- packed as little-endian doubles and are unpacked by one struct.unpack into
-- one array; records are single strings of packed doubles (read with one
-- MGET, written with SET .. PX); the reply is one packed string. No number
-- is formatted or parsed as text, and no table is built per limit.
--
-- KEYS: the record key of every limit, then the set key of every unique
--   limit (in limit order).
-- ARGV[1]: the struct format of ARGV[2]; ARGV[2]: the packed decision;
--   ARGV[3]: idle TTL in milliseconds (text); ARGV[4..]: the unique values,
--   one per unique limit (in limit order).
-- Reply: one string: refused (byte), then per limit
--   flags (byte: 1 over, 2 stored, 4 seen known, 8 seen, 16 extra known),
--   value (double), extra (double: EWMA base rate for the retry time, GCRA
--   retry ns, bucket retry ms).
--
-- P, the unpacked parameters: P[1] explicit time (1) or TIME (0), P[2]
-- seconds, P[3] microseconds, P[4] number of limits; then each limit from
-- offset o: P[o] algorithm (1 EWMA, 2 GCRA, 3 bucket, 4 same), P[o+1] blocking,
-- P[o+2] count, and
--   EWMA   P[o+3] limit, +4 period, +5 mode (0 leaky, 1 strict, 2 readonly),
--          +6 unique set (0 none, 1 Bloom, 2 exact), +7 +8 Bloom words,
--          +9 Bloom size;
--   GCRA   P[o+3] emission ns, +4 tolerance ns, +5 increment ns;
--   bucket P[o+3] burst, +4 leak per second, +5 op (0 check, 1 commit,
--          2 cancel), +6 verdict (0 other, 1 ham, 2 spam), +7 dynamic,
--          +8 +9 ham/spam rate factors, +10 +11 ham/spam burst factors,
--          +12 +13 max rate/burst multipliers;
--   same   P[o+3] the (earlier, EWMA) limit it is answered from, counted from 1,
--          +4 its own limit. Its KEYS entry is that limit's record key (read, never
--          written); its count is ignored.

local MAX_EXACT = 65536
-- Parameters per limit, by algorithm.
local SIZE = { 10, 6, 14, 5 }

local P = { struct.unpack(ARGV[1], ARGV[2]) }
local explicit = P[1] == 1
local now_s, now_u = P[2], P[3]
if not explicit then
  local t = redis.call('TIME')
  now_s = tonumber(t[1]); now_u = tonumber(t[2])
end
local n = P[4]
local idle_ms = ARGV[3]

-- Every record in one read (a key that holds no string reads as nil, so a
-- record in an older layout counts as absent and is replaced on write).
local got = redis.call('MGET', unpack(KEYS, 1, n))

-- ---------------------------------------------------------------- state cache
-- Records are decoded once per pass and kept in `cache` by key (a key may
-- appear twice in a decision); writes go to the cache and are flushed only
-- after the decision is settled. Each state table is built with every field
-- of its layout (one allocation, no rehash).
local cache

-- Record layouts (packed little-endian doubles): EWMA, unique EWMA, GCRA, bucket.
local E_FMT, U_FMT, G_FMT, B_FMT = '<ddd', '<dddddd', '<dd', '<ddddd'

local function load(i, algo, uflag)
  local key = KEYS[i]
  local st = cache[key]
  if st ~= nil then return st end
  local v = got[i]
  local len = v and #v or 0
  if algo == 1 then
    if uflag == 0 then
      st = { exists = false, dirty = false, ts = 0, tu = 0, rate = 0 }
      if len == 24 then
        st.exists = true
        st.ts, st.tu, st.rate = struct.unpack(E_FMT, v)
      end
    else
      st = { exists = false, dirty = false, ts = 0, tu = 0, rate = 0, cr = 0, k = 0, n = 0,
             bits = false, members = false, added = 0, reset = false }
      if len == 48 then
        st.exists = true
        st.ts, st.tu, st.rate, st.cr, st.k, st.n = struct.unpack(U_FMT, v)
      end
    end
  elseif algo == 2 then
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
  cache[key] = st
  return st
end

-- Which algorithms (and unique sets) the decision uses: creating a closure
-- costs time on every call, so only the evaluators needed are made.
local any = { false, false, false, false }
local uniques = 0
do
  local o = 5
  for _ = 1, n do
    local algo = P[o]
    any[algo] = true
    if algo == 1 and P[o + 6] ~= 0 then uniques = uniques + 1 end
    o = o + SIZE[algo]
  end
end

-- Each evaluator takes the limit's index i, its offset o and whether writes
-- are suppressed, and returns value, over, stored, seen (-1 not applicable,
-- 0, 1) and extra (nil: none).

-- Per limit of the current pass: its offset in P, value and whether it stored
-- (for the "same" limits answered from an earlier one).
local offs, vals, stores = {}, {}, {}

-- ---------------------------------------------------------------- EWMA
local eval_ewma, eval_same
if any[1] then
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

  -- Unique sets (kinds as stored: 1 Bloom, 2 exact). `u` is the set:
  -- { key, value, h1, h2 }.
  local set_contains, set_insert
  if uniques > 0 then
    -- Bloom probe offsets as Redis bit offsets (MSB first within a byte).
    local function probes(u, size)
      local out = {}
      local h = u[3]
      for i = 1, 8 do
        local byte = math.floor(h / 8) % size
        local bit = h % 8
        out[i] = byte * 8 + (7 - bit)
        h = (h + u[4]) % 4294967296
      end
      return out
    end

    set_contains = function(u, st, kind, size)
      if kind == 1 then
        for _, off in ipairs(probes(u, size)) do
          local set = st.bits and st.bits[off]
          if not set then
            set = (not st.reset) and redis.call('GETBIT', u[1], off) == 1
          end
          if not set then return false end
        end
        return true
      end
      if st.members and st.members[u[2]] then return true end
      if st.reset then return false end
      return redis.call('SISMEMBER', u[1], u[2]) == 1
    end

    set_insert = function(u, st, kind, size)
      if kind == 1 then
        if not st.bits then st.bits = {} end
        for _, off in ipairs(probes(u, size)) do st.bits[off] = true end
        return
      end
      if set_contains(u, st, kind, size) then return end
      local len = st.added
      if not st.reset then len = len + redis.call('SCARD', u[1]) end
      if len < MAX_EXACT then
        if not st.members then st.members = {} end
        st.members[u[2]] = true
        st.added = st.added + 1
      end
    end
  end

  -- `u`: the unique set (nil for a plain EWMA).
  eval_ewma = function(i, o, suppress, u)
    local limit, period, mode, uflag = P[o + 3], P[o + 4], P[o + 5], P[o + 6]
    local st = load(i, 1, uflag)
    local readonly = mode == 2
    local has = st.exists
    local ps, pu, prate = 0, 0, 0
    if has then ps = st.ts; pu = st.tu; prate = st.rate end
    local count = P[o + 2]
    local seen = -1
    local kind, size, newset = nil, nil, false
    if uflag ~= 0 then
      local keep = has and not (now_s > st.cr + period)
      if keep then
        kind = st.k; size = st.n
      else
        kind = uflag; size = P[o + 9]; newset = true
      end
      if not readonly then
        local hit
        if newset then hit = false else hit = set_contains(u, st, kind, size) end
        if hit then seen = 1; count = 0.0 else seen = 0 end
      end
    end
    local ecount = count
    if readonly then ecount = 0.0 end
    local rate = next_rate(has, ps, pu, prate, ecount, period)
    local over = not (rate < limit)
    local store
    if mode == 1 then store = true
    elseif mode == 2 then store = false
    else store = (not over) and not suppress end
    local base
    if not over then
      base = nil
    elseif store then
      base = rate
    elseif has then
      base = next_rate(true, ps, pu, prate, 0.0, period)
    else
      base = 0.0
    end
    if store then
      st.exists = true; st.dirty = true
      st.ts = now_s; st.tu = now_u; st.rate = rate
      if uflag ~= 0 then
        if newset then
          st.reset = true; st.bits = false; st.members = false; st.added = 0
          st.cr = now_s; st.k = kind; st.n = size
        end
        if not readonly then set_insert(u, st, kind, size) end
      end
    end
    return rate, over, store, seen, base
  end

  -- Exim's cached answer (src/store/eval.rs `same`): the rate of the earlier
  -- EWMA limit j compared with this limit's own m; nothing read or written.
  -- Extra, when over: the rate that stays stored on j's key (j's rate if j
  -- stored, else j's record decayed to now), for the retry time.
  if any[4] then
    eval_same = function(i, o)
      local j, limit = P[o + 3], P[o + 4]
      local value = vals[j]
      local over = not (value < limit)
      local base = nil
      if over then
        if stores[j] then
          base = value
        else
          local st = cache[KEYS[j]]
          local period = P[offs[j] + 4]
          if st.exists then
            base = next_rate(true, st.ts, st.tu, st.rate, 0.0, period)
          else
            base = 0.0
          end
        end
      end
      return value, over, false, -1, base
    end
  end
end

-- ---------------------------------------------------------------- GCRA
-- TAT is kept as whole seconds `s` plus nanoseconds `n`, so that every
-- quantity the script computes (differences to now) is an exact integer.
local eval_gcra
if any[2] then
  eval_gcra = function(i, o, suppress)
    local t, tau, inc = P[o + 3], P[o + 4], P[o + 5]
    local st = load(i, 2)
    local now_n = now_u * 1000
    local d = 0
    if st.exists then
      d = (st.s - now_s) * 1000000000 + (st.n - now_n)
      if d < 0 then d = 0 end
    end
    local nd = d + inc
    local level = nd / t
    local over = nd - tau > 0
    local retry
    if not over then retry = 0
    elseif inc > tau then retry = nil
    else retry = nd - tau end
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
if any[3] then
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

  eval_bucket = function(i, o, suppress)
    local burst, per_second, op, verdict = P[o + 3], P[o + 4], P[o + 5], P[o + 6]
    local dyn = P[o + 7] == 1
    local st = load(i, 3)
    local now_ms = (now_s * 1000000 + now_u) / 1000.0
    local n = P[o + 2]
    if n < 1.0 then n = 1.0 end
    local prev = nil
    if st.exists then
      prev = { l = st.l, b = st.b, p = st.p, dr = st.dr, db = st.db }
    end
    local nx, level, over, retry
    if op == 0 then
      if prev == nil then
        nx = { l = now_ms, b = 0.0, p = n, dr = 10000, db = 10000 }
        level = 0.0; over = false; retry = 0.0
      else
        nx = { l = prev.l, b = prev.b, p = prev.p, dr = prev.dr, db = prev.db }
        if nx.b < 0.0 then nx.b = 0.0 end
        if nx.p < 0.0 then nx.p = 0.0 end
        local leak = per_second / 1000.0
        if dyn then
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
        local cap = burst
        if dyn then cap = burst * nx.db / 10000.0 end
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
    elseif op == 1 then
      nx = prev or { l = now_ms, b = 0.0, p = n, dr = 10000, db = 10000 }
      if dyn then
        local fr, fb = 1.0, 1.0
        if verdict == 1 then fr = P[o + 8]; fb = P[o + 10]
        elseif verdict == 2 then fr = P[o + 9]; fb = P[o + 11] end
        nx.dr = step_mult(nx.dr, fr, P[o + 12])
        nx.db = step_mult(nx.db, fb, P[o + 13])
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
    if op == 0 and suppress and not over then
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
-- The unique sets, by limit index.
local sets = {}
if uniques > 0 then
  local o, k = 5, 0
  for i = 1, n do
    if P[o] == 1 and P[o + 6] ~= 0 then
      k = k + 1
      sets[i] = { KEYS[n + k], ARGV[3 + k], P[o + 7], P[o + 8] }
    end
    o = o + SIZE[P[o]]
  end
end

-- Evaluates every limit; after a refusal, once more with writes suppressed.
-- `res` gets three reply values per limit: flags, value, extra.
local res = {}
local refused = false
for attempt = 1, 2 do
  local suppress = attempt == 2
  cache = {}
  local o = 5
  for i = 1, n do
    local algo = P[o]
    offs[i] = o
    local value, over, stored, seen, extra
    if algo == 1 then value, over, stored, seen, extra = eval_ewma(i, o, suppress, sets[i])
    elseif algo == 2 then value, over, stored, seen, extra = eval_gcra(i, o, suppress)
    elseif algo == 3 then value, over, stored, seen, extra = eval_bucket(i, o, suppress)
    else
      local j = P[o + 3]
      if eval_same ~= nil and j >= 1 and j < i and P[offs[j]] == 1 then
        value, over, stored, seen, extra = eval_same(i, o)
      else
        -- Not answerable (encode.rs refuses it): as the memory store, not over.
        value, over, stored, seen, extra = 0.0, false, false, -1, nil
      end
    end
    vals[i] = value; stores[i] = stored
    if over and P[o + 1] == 1 then refused = true end
    local flags = 0
    if over then flags = 1 end
    if stored then flags = flags + 2 end
    if seen >= 0 then flags = flags + 4 + 8 * seen end
    if extra ~= nil then flags = flags + 16 else extra = 0.0 end
    res[3 * i - 2] = flags; res[3 * i - 1] = value; res[3 * i] = extra
    o = o + SIZE[algo]
  end
  if not refused then break end
end

-- Flush every written record with its TTL.
local o = 5
for i = 1, n do
  local algo = P[o]
  local key = KEYS[i]
  local st = cache[key]
  -- A "same" limit writes nothing (its key is an earlier limit's).
  if algo ~= 4 and st.dirty then
    st.dirty = false
    if algo == 1 then
      local u = sets[i]
      if u == nil then
        redis.call('SET', key, struct.pack(E_FMT, st.ts, st.tu, st.rate), 'PX', idle_ms)
      else
        redis.call('SET', key,
          struct.pack(U_FMT, st.ts, st.tu, st.rate, st.cr, st.k, st.n), 'PX', idle_ms)
        local skey = u[1]
        if st.reset then
          redis.call('DEL', skey)
          if st.k == 1 then redis.call('SETRANGE', skey, st.n - 1, '\0') end
        end
        if st.k == 1 then
          if st.bits then
            for off, _ in pairs(st.bits) do redis.call('SETBIT', skey, off, 1) end
          end
        elseif st.members then
          for m, _ in pairs(st.members) do redis.call('SADD', skey, m) end
        end
        st.reset = false; st.bits = false; st.members = false; st.added = 0
        if redis.call('EXISTS', skey) == 1 then redis.call('PEXPIRE', skey, idle_ms) end
      end
    elseif algo == 2 then
      -- A TAT in the past is exactly a new key, so the key can go then;
      -- with an explicit (simulated) time the server clock is unrelated.
      local ttl = idle_ms
      if not explicit then ttl = st.ttl_ms end
      redis.call('SET', key, struct.pack(G_FMT, st.s, st.n), 'PX', ttl)
    else
      redis.call('SET', key, struct.pack(B_FMT, st.l, st.b, st.p, st.dr, st.db), 'PX', idle_ms)
    end
  end
  o = o + SIZE[algo]
end

return struct.pack('<B' .. string.rep('Bdd', n), refused and 1 or 0, unpack(res))
