-- floodgate: apply one decision (every limit of one SMTP event) atomically.
--
-- This is a transcription of src/store/eval.rs, src/store/memory.rs
-- (decide_many) and src/limit/{ewma,gcra,bucket}.rs. Lua numbers are IEEE
-- doubles, so keeping Rust's operation order gives bit-identical rates.
--
-- KEYS: two per limit: the record hash, then the unique-set key.
-- ARGV[1], ARGV[2]: explicit time (seconds, microseconds) or "" "" to use
--   Redis TIME; ARGV[3]: idle TTL in milliseconds; then one group per limit,
--   starting with its algorithm letter:
--   E blocking count limit period mode(l|s|r) uflag(-|b|x) value h1 h2 bloomsize
--   G blocking count t_ns tau_ns inc_ns
--   B blocking count burst per_second op(c|m|x) verdict(h|s|o) dyn(0|1)
--     hfr sfr hfb sfb maxr maxb
-- Reply: { refused, then per limit: value, over, stored, seen, extra }
--   (floats as "%.17g" strings; seen -1 = not applicable; extra = EWMA base
--   rate for the retry time, GCRA retry ns, bucket retry ms, "" for none).

local MAX_EXACT = 65536

local now_s, now_u
if ARGV[1] ~= '' then
  now_s = tonumber(ARGV[1]); now_u = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now_s = tonumber(t[1]); now_u = tonumber(t[2])
end
local explicit = ARGV[1] ~= ''
local idle_ms = tonumber(ARGV[3])

local function f(x)
  return string.format('%.17g', x)
end

-- Parse the limit groups.
local reqs = {}
local c = 4
local nk = 0
while c <= #ARGV do
  local r = { algo = ARGV[c], blocking = ARGV[c + 1] == '1', count = tonumber(ARGV[c + 2]) }
  nk = nk + 1
  r.key = KEYS[2 * nk - 1]
  r.skey = KEYS[2 * nk]
  if r.algo == 'E' then
    r.limit = tonumber(ARGV[c + 3]); r.period = tonumber(ARGV[c + 4]); r.mode = ARGV[c + 5]
    r.uflag = ARGV[c + 6]; r.value = ARGV[c + 7]
    r.h1 = tonumber(ARGV[c + 8]); r.h2 = tonumber(ARGV[c + 9]); r.bsize = tonumber(ARGV[c + 10])
    c = c + 11
  elseif r.algo == 'G' then
    r.t = tonumber(ARGV[c + 3]); r.tau = tonumber(ARGV[c + 4]); r.inc = tonumber(ARGV[c + 5])
    c = c + 6
  else
    r.burst = tonumber(ARGV[c + 3]); r.per_second = tonumber(ARGV[c + 4])
    r.op = ARGV[c + 5]; r.verdict = ARGV[c + 6]; r.dyn = ARGV[c + 7] == '1'
    r.hfr = tonumber(ARGV[c + 8]); r.sfr = tonumber(ARGV[c + 9])
    r.hfb = tonumber(ARGV[c + 10]); r.sfb = tonumber(ARGV[c + 11])
    r.maxr = tonumber(ARGV[c + 12]); r.maxb = tonumber(ARGV[c + 13])
    c = c + 14
  end
  reqs[nk] = r
end

-- ---------------------------------------------------------------- state cache
-- Records are read once and kept in `cache` for the pass; writes go to the
-- cache and are flushed only after the decision is settled.
local cache

local function load(r)
  local st = cache[r.key]
  if st ~= nil then return st end
  local h = redis.call('HGETALL', r.key)
  if #h == 0 then
    st = { exists = false }
  else
    st = { exists = true }
    for i = 1, #h, 2 do st[h[i]] = h[i + 1] end
  end
  st.bits = {}; st.members = {}; st.added = 0; st.reset = false
  cache[r.key] = st
  return st
end

-- ---------------------------------------------------------------- EWMA
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

local function is_over(rate, limit)
  return not (rate < limit)
end

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

local function set_contains(r, st, kind, size)
  if kind == 'b' then
    for _, off in ipairs(probes(r, size)) do
      local set = st.bits[off]
      if not set then
        set = (not st.reset) and redis.call('GETBIT', r.skey, off) == 1
      end
      if not set then return false end
    end
    return true
  end
  if st.members[r.value] then return true end
  if st.reset then return false end
  return redis.call('SISMEMBER', r.skey, r.value) == 1
end

local function set_insert(r, st, kind, size)
  if kind == 'b' then
    for _, off in ipairs(probes(r, size)) do st.bits[off] = true end
    return
  end
  if set_contains(r, st, kind, size) then return end
  local len = st.added
  if not st.reset then len = len + redis.call('SCARD', r.skey) end
  if len < MAX_EXACT then
    st.members[r.value] = true
    st.added = st.added + 1
  end
end

local function eval_ewma(r, suppress)
  local st = load(r)
  local readonly = r.mode == 'r'
  local has = st.exists
  local ps, pu, prate = 0, 0, 0
  if has then ps = tonumber(st.ts); pu = tonumber(st.tu); prate = tonumber(st.rate) end
  local count = r.count
  local seen = -1
  local kind, size, newset = nil, nil, false
  if r.uflag ~= '-' then
    local keep = has and not (now_s > tonumber(st.cr) + r.period)
    if keep then
      kind = st.k; size = tonumber(st.n)
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
  local over = is_over(rate, r.limit)
  local store
  if r.mode == 's' then store = true
  elseif r.mode == 'r' then store = false
  else store = (not over) and not suppress end
  local base
  if not over then
    base = ''
  elseif store then
    base = f(rate)
  elseif has then
    base = f(next_rate(true, ps, pu, prate, 0.0, r.period))
  else
    base = f(0.0)
  end
  if store then
    st.exists = true; st.dirty = true
    st.ts = now_s; st.tu = now_u; st.rate = rate
    if r.uflag ~= '-' then
      if newset then
        st.reset = true; st.bits = {}; st.members = {}; st.added = 0
        st.cr = now_s; st.k = kind; st.n = size
      end
      if not readonly then set_insert(r, st, kind, size) end
    end
  end
  return { f(rate), over and 1 or 0, store and 1 or 0, seen, base }, over
end

-- ---------------------------------------------------------------- GCRA
-- TAT is kept as whole seconds `s` plus nanoseconds `n`, so that every
-- quantity the script computes (differences to now) is an exact integer.
local function eval_gcra(r, suppress)
  local st = load(r)
  local now_n = now_u * 1000
  local d = 0
  if st.exists then
    d = (tonumber(st.s) - now_s) * 1000000000 + (tonumber(st.n) - now_n)
    if d < 0 then d = 0 end
  end
  local nd = d + r.inc
  local level = nd / r.t
  local over = nd - r.tau > 0
  local retry
  if not over then retry = '0'
  elseif r.inc > r.tau then retry = ''
  else retry = f(nd - r.tau) end
  local store = (not over) and not suppress
  if store then
    local total = now_n + nd
    local carry = math.floor(total / 1000000000)
    st.exists = true; st.dirty = true
    st.s = now_s + carry; st.n = total - carry * 1000000000
    st.ttl_ms = math.floor(nd / 1000000) + 1000
  end
  return { f(level), over and 1 or 0, store and 1 or 0, -1, retry }, over
end

-- ---------------------------------------------------------------- bucket
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

local function eval_bucket(r, suppress)
  local st = load(r)
  local now_ms = (now_s * 1000000 + now_u) / 1000.0
  local n = r.count
  if n < 1.0 then n = 1.0 end
  local prev = nil
  if st.exists then
    prev = { l = tonumber(st.l), b = tonumber(st.b), p = tonumber(st.p),
             dr = tonumber(st.dr), db = tonumber(st.db) }
  end
  local nx, level, over, retry
  if r.op == 'c' then
    if prev == nil then
      nx = { l = now_ms, b = 0.0, p = n, dr = 10000, db = 10000 }
      level = 0.0; over = false; retry = f(0.0)
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
        if total <= cap and leak > 0.0 then retry = f(excess / leak) else retry = '' end
      else
        over = false
        nx.p = nx.p + n
        retry = f(0.0)
      end
    end
  elseif r.op == 'm' then
    nx = prev or { l = now_ms, b = 0.0, p = n, dr = 10000, db = 10000 }
    if r.dyn then
      local fr, fb = 1.0, 1.0
      if r.verdict == 'h' then fr = r.hfr; fb = r.hfb
      elseif r.verdict == 's' then fr = r.sfr; fb = r.sfb end
      nx.dr = step_mult(nx.dr, fr, r.maxr)
      nx.db = step_mult(nx.db, fb, r.maxb)
    end
    if nx.b < 0.0 then nx.b = n else nx.b = nx.b + n end
    nx.p = nx.p - n
    if nx.p < 0.0 then nx.p = 0.0 end
    nx.l = now_ms
    level = nx.b; over = false; retry = f(0.0)
  else
    nx = prev or { l = now_ms, b = 0.0, p = 0.0, dr = 10000, db = 10000 }
    nx.p = nx.p - n
    if nx.p < 0.0 then nx.p = 0.0 end
    nx.l = now_ms
    level = nx.b; over = false; retry = f(0.0)
  end
  local write = nx
  if r.op == 'c' and suppress and not over then
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
  return { f(level), over and 1 or 0, write ~= nil and 1 or 0, -1, retry }, over
end

-- ---------------------------------------------------------------- decision
local function pass(suppress)
  cache = {}
  local out = {}
  local refused = false
  for i, r in ipairs(reqs) do
    local res, over
    if r.algo == 'E' then res, over = eval_ewma(r, suppress)
    elseif r.algo == 'G' then res, over = eval_gcra(r, suppress)
    else res, over = eval_bucket(r, suppress) end
    if over and r.blocking then refused = true end
    for _, v in ipairs(res) do out[#out + 1] = v end
  end
  return refused, out
end

local refused, out = pass(false)
if refused then
  refused, out = pass(true)
  refused = true
end

-- Flush every written record with its TTL.
for i, r in ipairs(reqs) do
  local st = cache[r.key]
  if st and st.dirty then
    st.dirty = false
    local ttl = idle_ms
    if r.algo == 'E' then
      local fields = { 'ts', st.ts, 'tu', st.tu, 'rate', f(st.rate) }
      if r.uflag ~= '-' then
        fields[7] = 'cr'; fields[8] = st.cr; fields[9] = 'k'; fields[10] = st.k
        fields[11] = 'n'; fields[12] = st.n
      end
      redis.call('HSET', r.key, unpack(fields))
      if r.uflag ~= '-' then
        if st.reset then
          redis.call('DEL', r.skey)
          if st.k == 'b' then redis.call('SETRANGE', r.skey, st.n - 1, '\0') end
        end
        if st.k == 'b' then
          for off, _ in pairs(st.bits) do redis.call('SETBIT', r.skey, off, 1) end
        else
          for m, _ in pairs(st.members) do redis.call('SADD', r.skey, m) end
        end
        st.reset = false; st.bits = {}; st.members = {}; st.added = 0
        if redis.call('EXISTS', r.skey) == 1 then redis.call('PEXPIRE', r.skey, ttl) end
      end
    elseif r.algo == 'G' then
      redis.call('HSET', r.key, 's', f(st.s), 'n', f(st.n))
      -- A TAT in the past is exactly a new key, so the key can go then;
      -- with an explicit (simulated) time the server clock is unrelated.
      if not explicit then ttl = st.ttl_ms end
    else
      redis.call('HSET', r.key, 'l', f(st.l), 'b', f(st.b), 'p', f(st.p),
        'dr', f(st.dr), 'db', f(st.db))
    end
    redis.call('PEXPIRE', r.key, ttl)
  end
end

table.insert(out, 1, refused and 1 or 0)
return out
