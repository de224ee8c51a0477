-- Argo CD health of a conveyor.dev MessageQueueCluster (kstatus conditions the operator writes).
-- Progressing until the operator has seen the latest spec; Suspended while paused; Degraded when
-- the spec cannot be carried out (Stalled) or a broker group has no master (Degraded); Healthy
-- when Ready.
local hs = { status = "Progressing", message = "Waiting for the operator" }
if obj.status == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= nil
    and obj.status.observedGeneration < obj.metadata.generation then
  hs.message = "The operator has not acted on the latest spec yet"
  return hs
end
local c = {}
for _, cond in ipairs(obj.status.conditions or {}) do
  c[cond.type] = cond
end
local function holds(t)
  return c[t] ~= nil and c[t].status == "True"
end
local function say(t, default)
  if c[t] ~= nil and c[t].message ~= nil and c[t].message ~= "" then
    return c[t].message
  end
  return default
end
if holds("Paused") then
  return { status = "Suspended", message = say("Paused", "Reconciliation is paused") }
end
if holds("Stalled") then
  return { status = "Degraded", message = say("Stalled", "The spec cannot be carried out") }
end
if holds("Degraded") then
  return { status = "Degraded", message = say("Degraded", "A broker group has no master") }
end
if holds("Ready") then
  return { status = "Healthy", message = say("Ready", "Ready") }
end
hs.message = say("Reconciling", say("Ready", hs.message))
return hs
