-- Runs an Argo CD health check as Argo CD does (the object in the global `obj`, the script's
-- returned table its health): lua5.1 argocd-health.lua CHECK.lua OBJECT.json prints
-- "STATUS<TAB>MESSAGE".
local cjson = require("cjson")
local file = assert(io.open(arg[2], "r"))
local text = file:read("*a")
file:close()
obj = cjson.decode(text)
local hs = dofile(arg[1])
io.write(tostring(hs.status), "\t", tostring(hs.message or ""), "\n")
