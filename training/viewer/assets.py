"""The viewer page's inline style sheet and script (the page loads no other file)."""

STYLE = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 24px 40px;color:#222}
h1{font-size:22px;margin:18px 0 4px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:16px;margin:16px 0 6px}h4{margin:18px 0 6px}small{color:#666;font-weight:normal}
.meta{color:#444}.hint{color:#555;margin:4px 0 10px}
.charts{display:flex;flex-wrap:wrap;gap:8px}.chart{margin:0;border:1px solid #eee;border-radius:6px}
.ct{font-weight:600;font-size:13px}.tick{font-size:10px;fill:#555}.legend{font-size:11px}
.axis{stroke:#999}table{border-collapse:collapse}
th,td{padding:3px 8px;text-align:left;vertical-align:top}
.stats td,.stats th,.groups td,.groups th{border-bottom:1px solid #eee}
.hist{display:inline-flex;align-items:flex-end;gap:2px;height:30px;margin-right:6px}
.bar{display:inline-flex;flex-direction:column;align-items:center;font-size:9px}
.bar span{display:block;width:10px;background:#56B4E9}.bar em{font-style:normal;color:#666}
tr.pick{cursor:pointer}tr.pick:hover,tr.pick.open{background:#eef5fb}
.grid{overflow-x:auto;border:1px solid #ddd;border-radius:6px}
table.traj thead th{position:sticky;top:0;background:#fafafa;border-bottom:1px solid #ddd}
table.traj thead th+th{min-width:190px}table.traj tbody th{color:#666;width:2em}
td.step{border:1px solid #eee;max-width:260px;min-width:190px}td.invalid{background:#fdecea}
td.empty{background:#fafafa}code.act{display:block;white-space:pre-wrap;word-break:break-word;
font-size:12px;background:#f4f4f4;padding:2px 4px;border-radius:3px;margin:2px 0}
.nums{display:flex;flex-wrap:wrap;gap:2px 10px;font-size:12px}
.sg{display:inline-block;min-width:22px;text-align:center;border-radius:9px;font-size:11px;
font-weight:700;color:#000;padding:0 5px}.sg.solo{background:#eee;color:#999}
.pos{color:#0a7d32}.neg{color:#b3261e}.zero{color:#666}
pre{white-space:pre-wrap;word-break:break-word;font-size:12px;margin:4px 0;max-height:320px;
overflow:auto}
details summary{cursor:pointer;color:#555;font-size:12px}
details.stats>summary h2{display:inline-block;border:0;color:#222}
.state{margin:8px 0 14px;padding:6px 8px;border-left:4px solid #ddd}
.rank td{border-bottom:1px solid #f0f0f0}
"""

# The hash holds the group id percent-encoded (group_href), so any id reads back as itself; a
# hand-typed address that is no valid encoding is taken as it stands, and a NUL reads as the
# U+FFFD the HTML parser made of it in the data-group attributes.
SCRIPT = r"""
(function(){
  var view=document.getElementById('group-view');
  if(!view)return;
  var templates=document.querySelectorAll('template[data-group]');
  function open(group){
    var t=Array.prototype.find.call(templates,function(c){return c.dataset.group===group;});
    if(!t)return false;
    view.replaceChildren(t.content.cloneNode(true));
    document.querySelectorAll('tr.pick').forEach(function(r){
      r.classList.toggle('open',r.dataset.group===group);});
    return true;
  }
  function go(r){location.hash='group='+encodeURIComponent(r.dataset.group);}
  document.querySelectorAll('tr.pick').forEach(function(r){
    r.addEventListener('click',function(){go(r);});
    r.addEventListener('keydown',function(e){if(e.key==='Enter')go(r);});
  });
  function decoded(text){try{return decodeURIComponent(text);}catch(e){return text;}}
  function fromHash(){var m=location.hash.match(/^#group=([\s\S]*)$/);
    if(m&&open(decoded(m[1]).replace(/\u0000/g,'\ufffd')))view.scrollIntoView();}
  window.addEventListener('hashchange',fromHash);
  if(location.hash)fromHash();
})();
"""
