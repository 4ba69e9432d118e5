// The agent console: works the L2/L3 queue through /v1/handoff with the agent's Bearer token.
// Plain DOM, no framework and no build step; every text goes in through textContent (never HTML).

const TOKEN_KEY = "switchboard.console.token";
const LANG_KEY = "switchboard.console.lang";
const LEVELS = ["auto", "supervisor", "manager", "director"];
const SESSION_CHECK_MS = 15000;     // a revoked token is noticed within this even when nothing else happens
const MAX_QUEUE = 2000;
const LANG_NAMES = { zh: "中文", en: "English" };             // tickets listed (pages of 500)

const T = {
  en: {
    title: "Agent console", signOut: "Sign out", signInTitle: "Sign in", signIn: "Sign in", token: "Agent token",
    signInHelp: "Paste your agent token (switchboard tokens issue NAME). It is kept in this tab only.",
    supervisor: "Supervisor view", stQueued: "queued", stClaimed: "being worked", stOverdue: "past SLA now",
    stBreaches: "SLA breaches (24 h)", stOldest: "oldest wait", closed24: "closed (24 h)",
    handleAvg: "handling time (avg)", waitAvg: "wait before claim (avg)",
    queue: "Queue", claimNext: "Claim next", refresh: "Refresh", priority: "Priority", kind: "Kind", sla: "SLA",
    team: "Team", channel: "Channel", language: "Language", reason: "Reason", status: "Status", actions: "Actions",
    queueEmpty: "No open tickets in your teams.", ticket: "Ticket", claim: "Claim", open: "Open",
    back: "Back to queue", approvalTitle: "Approval needed", levelNeeded: "level needed", yourLevel: "your level",
    draft: "The bot's draft", approve: "Approve", edit: "Edit", reject: "Reject", editSend: "Edit and send",
    rejectReason: "Reason for rejecting", transcript: "Transcript", reply: "Reply to the customer",
    replyHint: "Your message leaves through the customer's channel", send: "Send",
    outbox: "Outbox (delivery to the customer's channel)", kindCol: "Kind", text: "Text", attempts: "Attempts",
    closeTitle: "Hand over or close", teamHint: "team", transfer: "Transfer", resolve: "Resolve",
    approvalCloses: "An approval closes only by Approve or Reject (at its level), or by a supervisor's Cancel, which ends the customer's request.",
    returnBot: "Return to bot", oSolved: "solved", oRefunded: "refunded", oDuplicate: "duplicate",
    oNoResponse: "no response", decisions: "Decisions and why", evidence: "Evidence", facts: "Customer facts",
    flow: "Flow and proposed tool call", auditLog: "Ticket log",
    live: "Live", reconnecting: "Reconnecting…", nothingToClaim: "Nothing to claim in your teams ({teams}) right now.",
    signedOutRevoked: "You were signed out: the token is invalid, expired or revoked.",
    reveal: "Reveal", revealReason: "Why do you need this value? (recorded in the ticket log)",
    revealed: "Revealed; recorded in the ticket log.",
    signedOut: "Signed out.", badToken: "That token was not accepted.",
    sent: "Sent: the message is queued for the customer's channel.", approved: "Approved and sent.",
    rejected: "Draft rejected. The ticket stays with you.", resolved: "Resolved.", returned: "Handed back to the bot.",
    transferred: "Transferred.", claimed: "Claimed.", leaseLost: "You no longer hold this ticket.",
    refuseLevel: "You may not approve this: it needs level {need}, yours is {mine}. Transfer it to someone who may.",
    needReason: "Give a reason for rejecting.", needTeam: "Name a team.", emptyReply: "Write a message first.",
    overdue: "overdue {t}", heldBy: "held by", you: "you", queued: "queued", claimedSt: "claimed",
    resolvedSt: "resolved", returned_to_botSt: "returned to bot", cancelledSt: "cancelled",
    assist: "assist", handoff: "handoff", approval: "approval", urgent: "urgent", high: "high", normal: "normal",
    low: "low", ruleHit: "Rule hit", nearest: "Nearest examples", escalation: "Escalation", noDraft: "No draft text.",
    draftStatus: "Draft: {s}", amount: "Amount", created: "Opened", lease: "Lease until", customer: "Customer",
    intent: "intent", tier: "tier", confidence: "confidence", by: "by", none: "–", amountTitle: "Amount",
    d_pending: "pending", d_approved: "approved", d_edited: "edited and sent", d_rejected: "rejected",
    s_customer: "customer", s_bot: "bot", s_agent: "agent", s_system: "system",
    apOrder: "Order", apCall: "Proposed tool call", apShop: "Order in the shop", apRequest: "Customer's request",
    apWorkflow: "Workflow", apReasonHint: "Why reject (optional)", apNoReason: "rejected in the console, no reason given",
    needs_auto: "Needs no approval", needs_supervisor: "Needs a supervisor", needs_manager: "Needs a manager",
    needs_director: "Needs a director",
    apRefuse: "{needs}: your approval level is {mine}. Transfer the ticket to someone who may decide it.",
    apClaimFirst: "Claim the ticket to approve or reject it.",
    apApprovedMsg: "Approved: the workflow goes on and the customer is told.",
    apRejectedMsg: "Rejected: nothing runs and the customer is told.",
    apDecided_approved: "Approved by {who}{reason}. The customer's request: {status}.",
    apDecided_rejected: "Rejected by {who}{reason}. The customer's request: {status}.",
    apDecided_cancelled: "Cancelled by {who}{reason}. The customer's request: {status}.",
    lv_auto: "auto", lv_supervisor: "supervisor", lv_manager: "manager", lv_director: "director",
    ev_total: "total", ev_status: "status", ev_refunded: "refunded so far",
    searchHint: "Search: customer, order, words", vAll: "All", vMine: "Mine", vUnassigned: "Unassigned",
    allTeams: "All teams", allKinds: "All kinds", allLanguages: "All languages", allChannels: "All channels",
    allPriorities: "All priorities", pickTicket: "Pick a ticket on the left to preview it; claim it to work on it.",
    waiting: "waiting {t}", noMatch: "No tickets match the search and filters.", name: "Name", orders: "Recent orders",
    earlier: "Earlier tickets and outcomes", customerId: "Customer id", phone: "Phone",
    shopView: "From the shop", memPending: "loading…", memPartial: "partly: some of the shop's reads failed",
    memUnavailable: "not available: the shop did not answer",
    holdLabel: "Waiting", hOpen: "open", hPending: "pending (waiting for the customer)",
    hOnHold: "on hold (waiting on someone else)", tagHint: "add a tag", add: "Add", assignHint: "colleague's name",
    assign: "Assign", macroPick: "Insert a canned reply…", notes: "Internal notes", noteHint: "Only colleagues see this",
    addNote: "Add note", noteAdded: "Note added (not sent to the customer).", assigned: "Assigned to {who}.",
    needAgent: "Name a colleague.", holdSet: "Status: {s}.", macroMissing: "Not known for this ticket: {v}",
    pending: "pending", on_hold: "on hold", removeTag: "Remove tag {t}",
    paTitle: "The bot stopped here: waiting for a confirmation", paConfirm: "Confirm for the customer",
    paWhat: "{workflow}: {summary}. Check the values, correct them if needed, and confirm: the tool runs under your name.",
    paMasked: "Shown masked: {args}. Leave a field as it is to keep the customer's value, or type the value the shop needs (reveal the customer's words in the transcript; the reveal is recorded).",
    paDone: "Done: {tools}. The customer was told: “{reply}”", paFailed: "The tool did not succeed ({tools}); the flow is {status}. The customer was told: “{reply}”",
    paGone: "Nothing waits for a confirmation any more.", paClaimFirst: "Claim the ticket to confirm it.",
    understood: "What the bot understood", undNone: "No turns of the bot in this conversation.",
    f_amounts: "Amounts mentioned", f_order_numbers: "Order numbers mentioned", f_sensitive: "Sensitive",
    f_do_not_contact: "Do not contact", os_paid: "paid", os_pending_payment: "pending payment", os_shipped: "shipped",
    os_delivered: "delivered", os_cancelled: "cancelled", os_refunded: "refunded",
    allOpen: "Open tickets", allHolds: "Any waiting status", hNotWaiting: "not waiting", allTags: "All tags",
    manageMacros: "Macros", meTitle: "Macros: canned replies per language", meNew: "New macro", meClose: "Close",
    meName: "Name", meTitleCol: "Title", meBody: "Text", meSave: "Save macro", meEdit: "Edit", meDelete: "Delete",
    meNameHint: "lower-case letters, digits, - and _ (e.g. shipped)", meTeamHint: "every team",
    meVars: "Variables: {vars}", meSaved: "Macro {name} ({lang}) saved.", meDeleted: "Macro {name} ({lang}) deleted.",
    meConfirmDelete: "Delete the macro {name} ({lang})?", meEmpty: "No macros yet.", meAllTeams: "every team",
  },
  zh: {
    title: "坐席工作台", signOut: "退出登录", signInTitle: "登录", signIn: "登录", token: "坐席令牌",
    signInHelp: "粘贴您的坐席令牌（switchboard tokens issue 名称）。令牌只保存在当前标签页。",
    supervisor: "主管视图", stQueued: "排队中", stClaimed: "处理中", stOverdue: "当前超时",
    stBreaches: "SLA 超时次数（24 小时）", stOldest: "最长等待", closed24: "已关闭（24 小时）",
    handleAvg: "平均处理时长", waitAvg: "平均等待认领",
    queue: "队列", claimNext: "认领下一个", refresh: "刷新", priority: "优先级", kind: "类型", sla: "SLA",
    team: "团队", channel: "渠道", language: "语言", reason: "原因", status: "状态", actions: "操作",
    queueEmpty: "您的团队暂无待处理工单。", ticket: "工单", claim: "认领", open: "查看",
    back: "返回队列", approvalTitle: "需要审批", levelNeeded: "所需级别", yourLevel: "您的级别",
    draft: "机器人草稿", approve: "批准", edit: "编辑", reject: "驳回", editSend: "编辑并发送",
    rejectReason: "驳回原因", transcript: "对话记录", reply: "回复客户",
    replyHint: "消息将通过客户所在渠道发出", send: "发送",
    outbox: "发件箱（发往客户渠道）", kindCol: "类别", text: "内容", attempts: "尝试次数",
    closeTitle: "转交或结束", teamHint: "团队", transfer: "转交", resolve: "解决",
    approvalCloses: "审批工单只能通过批准或驳回（需相应级别）结束，或由主管取消（同时终止客户的请求）。",
    returnBot: "交还机器人", oSolved: "已解决", oRefunded: "已退款", oDuplicate: "重复", oNoResponse: "客户未回应",
    decisions: "决策及依据", evidence: "检索证据", facts: "客户信息", flow: "流程状态与拟调用工具", auditLog: "工单日志",
    live: "实时", reconnecting: "正在重连…", nothingToClaim: "您的团队（{teams}）目前没有可认领的工单。",
    signedOutRevoked: "您已被登出：令牌无效、已过期或已被吊销。",
    reveal: "查看原文", revealReason: "为何需要查看此信息？（将记入工单日志）", revealed: "已显示原文，并已记入工单日志。",
    signedOut: "已退出登录。", badToken: "令牌未被接受。",
    sent: "已发送：消息已排队发往客户渠道。", approved: "已批准并发送。",
    rejected: "草稿已驳回，工单仍由您处理。", resolved: "已解决。", returned: "已交还机器人。",
    transferred: "已转交。", claimed: "已认领。", leaseLost: "您已不再持有此工单。",
    refuseLevel: "您无权批准：需要 {need} 级别，您的级别是 {mine}。请转交给有权限的同事。",
    needReason: "请填写驳回原因。", needTeam: "请填写团队。", emptyReply: "请先输入消息。",
    overdue: "已超时 {t}", heldBy: "处理人", you: "您", queued: "排队中", claimedSt: "已认领",
    resolvedSt: "已解决", returned_to_botSt: "已交还机器人", cancelledSt: "已取消",
    assist: "辅助", handoff: "转人工", approval: "审批", urgent: "紧急", high: "高", normal: "普通", low: "低",
    ruleHit: "命中规则", nearest: "最相近的示例", escalation: "升级", noDraft: "草稿没有文本。",
    draftStatus: "草稿：{s}", amount: "金额", created: "创建时间", lease: "租约到期", customer: "客户",
    intent: "意图", tier: "层级", confidence: "置信度", by: "来自", none: "–", amountTitle: "金额",
    d_pending: "待审核", d_approved: "已批准", d_edited: "已编辑并发送", d_rejected: "已驳回",
    s_customer: "客户", s_bot: "机器人", s_agent: "坐席", s_system: "系统",
    apOrder: "订单", apCall: "拟调用工具", apShop: "商店中的订单", apRequest: "客户的请求",
    apWorkflow: "流程", apReasonHint: "驳回原因（可选）", apNoReason: "rejected in the console, no reason given",
    needs_auto: "无需审批", needs_supervisor: "需要主管审批", needs_manager: "需要经理审批", needs_director: "需要总监审批",
    apRefuse: "{needs}：您的审批级别是 {mine}。请转交给有权限的同事。",
    apClaimFirst: "请先认领工单，再批准或驳回。",
    apApprovedMsg: "已批准：流程继续执行，并已通知客户。",
    apRejectedMsg: "已驳回：不执行任何操作，并已通知客户。",
    apDecided_approved: "已由 {who} 批准{reason}。客户请求的状态：{status}。",
    apDecided_rejected: "已由 {who} 驳回{reason}。客户请求的状态：{status}。",
    apDecided_cancelled: "已由 {who} 取消{reason}。客户请求的状态：{status}。",
    lv_auto: "自动", lv_supervisor: "主管", lv_manager: "经理", lv_director: "总监",
    ev_total: "总额", ev_status: "状态", ev_refunded: "已退款",
    searchHint: "搜索：客户、订单号、内容", vAll: "全部", vMine: "我的", vUnassigned: "未分配",
    allTeams: "全部团队", allKinds: "全部类型", allLanguages: "全部语言", allChannels: "全部渠道",
    allPriorities: "全部优先级", pickTicket: "在左侧选择工单即可预览；认领后开始处理。",
    waiting: "已等待 {t}", noMatch: "没有符合搜索和筛选条件的工单。", name: "姓名", orders: "最近订单",
    earlier: "以往工单与结果", customerId: "客户编号", phone: "电话",
    shopView: "商店资料", memPending: "正在加载…", memPartial: "部分：商店的部分查询失败",
    memUnavailable: "不可用：商店没有应答",
    holdLabel: "等待状态", hOpen: "处理中", hPending: "待客户回复", hOnHold: "挂起（等待他人）", tagHint: "添加标签",
    add: "添加", assignHint: "同事姓名", assign: "分配", macroPick: "插入快捷回复…", notes: "内部备注",
    noteHint: "仅同事可见", addNote: "添加备注", noteAdded: "备注已添加（不会发给客户）。", assigned: "已分配给 {who}。",
    needAgent: "请填写同事姓名。", holdSet: "状态：{s}。", macroMissing: "此工单缺少：{v}",
    pending: "待客户回复", on_hold: "挂起", removeTag: "移除标签 {t}",
    paTitle: "机器人停在这里：等待确认", paConfirm: "代客户确认",
    paWhat: "{workflow}：{summary}。请核对数值，必要时修改后确认：工具将以您的身份执行。",
    paMasked: "以下字段已脱敏：{args}。保持不变即沿用客户提供的值，或输入商店需要的值（可在对话记录中查看客户原文，查看会被记录）。",
    paDone: "已完成：{tools}。已告知客户：“{reply}”", paFailed: "工具未成功（{tools}），流程状态：{status}。已告知客户：“{reply}”",
    paGone: "已没有等待确认的操作。", paClaimFirst: "请先认领工单再确认。",
    understood: "机器人的理解", undNone: "此对话中没有机器人处理过的轮次。",
    f_amounts: "提到的金额", f_order_numbers: "提到的订单号", f_sensitive: "敏感客户", f_do_not_contact: "请勿联系",
    os_paid: "已付款", os_pending_payment: "待付款", os_shipped: "已发货", os_delivered: "已签收", os_cancelled: "已取消",
    os_refunded: "已退款",
    allOpen: "未关闭的工单", allHolds: "全部等待状态", hNotWaiting: "未在等待", allTags: "全部标签",
    manageMacros: "快捷回复", meTitle: "快捷回复（按语言）", meNew: "新建快捷回复", meClose: "关闭",
    meName: "名称", meTitleCol: "标题", meBody: "内容", meSave: "保存快捷回复", meEdit: "编辑", meDelete: "删除",
    meNameHint: "小写字母、数字、- 和 _（例如 shipped）", meTeamHint: "所有团队",
    meVars: "可用变量：{vars}", meSaved: "快捷回复 {name}（{lang}）已保存。", meDeleted: "快捷回复 {name}（{lang}）已删除。",
    meConfirmDelete: "删除快捷回复 {name}（{lang}）？", meEmpty: "暂无快捷回复。", meAllTeams: "所有团队",
  },
};

const $ = (id) => document.getElementById(id);
const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  lang: localStorage.getItem(LANG_KEY) || ((navigator.language || "").startsWith("zh") ? "zh" : "en"),
  me: null,
  tickets: [],
  current: null,        // the ticket on screen
  revealed: {},         // ref -> value this agent revealed on this ticket (kept only while it is open)
  lastEventId: null,
  stream: null,         // AbortController of the event stream
  timers: [],
  heartbeat: null,
  refreshPending: null,
  replyKey: null,       // Idempotency-Key of the reply being composed (kept across retries)
  draftKey: null,
  filters: { view: "all", q: "", team: "", kind: "", language: "", channel: "", priority: "", status: "", hold: "",
             tag: "" },
  channels: new Set(["web"]),
  tags: new Set(),
  macros: [],
  macroVars: [],
  pending: null,        // the action a flow of the current ticket stopped at (GET .../pending-action)
  paKey: null,
  colleagues: [],
  teams: new Set(),
};

function t(key, vars) {
  let s = (T[state.lang] && T[state.lang][key]) ?? T.en[key] ?? key;
  for (const [k, v] of Object.entries(vars || {})) s = s.replace(`{${k}}`, v);
  return s;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function notify(message, kind = "info") {
  const box = $("notice");
  box.textContent = message;
  box.className = `notice ${kind}`;
  box.hidden = !message;
}

function applyLanguage() {
  document.documentElement.lang = state.lang === "zh" ? "zh-CN" : "en";
  for (const node of document.querySelectorAll("[data-i18n]")) node.textContent = t(node.dataset.i18n);
  for (const node of document.querySelectorAll("[data-i18n-placeholder]")) node.placeholder = t(node.dataset.i18nPlaceholder);
  $("lang").textContent = state.lang === "zh" ? "English" : "中文";
  document.title = `switchboard · ${t("title")}`;
  if (state.me) {
    renderQueue();
    renderMacroEditor();
    if (state.current) renderTicket();
  }
}

// -- the API ------------------------------------------------------------------------------------

// an RFC 9457 problem: its detail, and each invalid field of a 422 with what is wrong with it
class ApiError extends Error {
  constructor(status, problem) {
    const fields = problemFields(problem);
    const detail = (problem && (problem.detail || problem.title)) || `HTTP ${status}`;
    super(fields.length ? `${detail} ${fields.map((f) => `${f.field}: ${f.msg}`).join("; ")}` : detail);
    this.status = status;
    this.problem = problem || {};
    this.fields = fields;
  }
}

function problemFields(problem) {
  return ((problem && Array.isArray(problem.errors)) ? problem.errors : []).map((e) => ({
    field: (e.loc || []).slice(["body", "query", "path", "header"].includes((e.loc || [])[0]) ? 1 : 0).join(".") || "request",
    msg: e.msg || e.type || "" }));
}

async function api(path, { method = "GET", body, key } = {}) {
  const headers = { Authorization: `Bearer ${state.token}`, Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (key) headers["Idempotency-Key"] = key;
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
                                   cache: "no-store", credentials: "omit" });
  if (resp.status === 401) {
    signOut(t("signedOutRevoked"));
    throw new ApiError(401, await resp.json().catch(() => null));
  }
  if (resp.status === 204) return null;
  const data = await resp.json().catch(() => null);
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

function newKey() {
  return (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(36).slice(2)}`);
}

// -- sign in and out ----------------------------------------------------------------------------

async function signIn(token) {
  state.token = token;
  try {
    state.me = await api("/v1/handoff/me");
  } catch (err) {
    state.token = null;
    state.me = null;
    sessionStorage.removeItem(TOKEN_KEY);
    if (err.status !== 401) notify(err.message, "error");
    else notify(t("badToken"), "error");
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  notify("");
  $("signin").hidden = true;
  $("desk").hidden = false;
  $("sign-out").hidden = false;
  $("who").hidden = false;
  $("who").textContent = `${state.me.display_name || state.me.name} · ${state.me.role} · ${state.me.teams.join(", ")}`;
  $("supervisor").hidden = !["supervisor", "admin"].includes(state.me.role);
  $("manage-macros").hidden = $("supervisor").hidden;     // the API lets only supervisors and admins change macros
  filtersFromUrl();
  // a filter the API refuses (an old or edited link) shows its problem; the desk still opens
  await Promise.all([loadQueue().catch((err) => err.status !== 401 && notify(err.message, "error")), loadDeskLists()]);
  openStream();
  state.timers.push(setInterval(tickClocks, 1000));
  state.timers.push(setInterval(checkSession, SESSION_CHECK_MS));
  if (!$("supervisor").hidden) {
    loadStats();
    state.timers.push(setInterval(loadStats, 10000));
  }
}

function signOut(message) {
  const wasSignedIn = !!state.me;
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.me = null;
  state.current = null;
  state.tickets = [];
  state.lastEventId = null;
  if (state.stream) state.stream.abort();
  state.stream = null;
  for (const id of state.timers) clearInterval(id);
  state.timers = [];
  stopHeartbeat();
  $("desk").hidden = true;
  $("ticket").hidden = true;
  $("signin").hidden = false;
  $("sign-out").hidden = true;
  $("who").hidden = true;
  $("live").hidden = true;
  $("manage-macros").hidden = true;
  $("macro-editor").hidden = true;
  $("token").value = "";
  $("queue-rows").replaceChildren();
  if (message && (wasSignedIn || message !== t("signedOutRevoked"))) notify(message, "error");
}

async function checkSession() {
  if (!state.token) return;
  try { await api("/v1/handoff/me"); } catch { /* a 401 signs out in api() */ }
}

// -- the queue ----------------------------------------------------------------------------------

let queueLoads = 0;

async function loadQueue() {
  performance.mark("queue-fetch-start");
  filtersToUrl();
  const load = ++queueLoads;          // filters change faster than lists arrive: only the latest one is shown
  const items = [];
  let cursor = null;
  do {
    const q = queueQuery();
    if (cursor) q.set("cursor", cursor);
    const page = await api(`/v1/handoff/tickets?${q}`);
    if (load !== queueLoads) return;
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && items.length < MAX_QUEUE);
  performance.mark("queue-fetched");
  state.tickets = items;
  renderQueue();
  performance.mark("queue-rendered");
  performance.measure("queue-load", "queue-fetch-start", "queue-rendered");
  performance.measure("queue-render", "queue-fetched", "queue-rendered");
  document.body.dataset.queueLoads = String(Number(document.body.dataset.queueLoads || 0) + 1);
}

// the filters live in the page's address too (?view=mine&tag=vip...): a reload or a shared link keeps them
const VIEWS = ["all", "mine", "unassigned"];

function filtersFromUrl() {
  const url = new URLSearchParams(location.search);
  for (const key of Object.keys(state.filters)) {
    const v = (url.get(key) || "").trim();
    state.filters[key] = key === "view" ? (VIEWS.includes(v) ? v : "all") : v.slice(0, 200);
  }
  showFilters();
}

function filtersToUrl() {
  const url = new URLSearchParams();
  for (const [k, v] of Object.entries(state.filters)) if (v && !(k === "view" && v === "all")) url.set(k, v);
  const next = url.toString() ? `?${url}` : "";
  if (next !== location.search) history.replaceState(null, "", next || location.pathname);
}

// the controls show the filters in force (after a reload, an option the list has not shown yet is added)
function showFilters() {
  $("q").value = state.filters.q;
  for (const sel of document.querySelectorAll("#queue-filters select[data-filter]")) {
    const v = state.filters[sel.dataset.filter] || "";
    if (v && ![...sel.options].some((o) => o.value === v)) sel.append(el("option", { value: v, text: v }));
    sel.value = v;
  }
  for (const b of document.querySelectorAll("#queue-filters button.view")) {
    b.setAttribute("aria-pressed", String(b.dataset.view === state.filters.view));
  }
}

// the list as the agent filtered it: every filter is a query parameter the server applies
function queueQuery() {
  const q = new URLSearchParams({ limit: "500" });
  for (const [k, v] of Object.entries(state.filters)) if (v && !(k === "view" && v === "all")) q.set(k, v);
  return q;
}

function filtersActive() {
  return Object.entries(state.filters).some(([k, v]) => v && !(k === "view" && v === "all"));
}

function fillSelect(id, values) {
  const sel = $(id);
  const keep = sel.value;
  const have = new Set([...sel.options].map((o) => o.value));
  for (const v of [...values].sort()) if (!have.has(v)) sel.append(el("option", { value: v, text: v }));
  sel.value = keep;
}

function scheduleRefresh() {
  if (state.refreshPending) return;
  state.refreshPending = setTimeout(async () => {
    state.refreshPending = null;
    if (!state.token) return;
    try { await loadQueue(); } catch { /* shown on the next action */ }
  }, 100);
}

function kindOf(ticket) {
  return ticket.approval_level && ticket.approval_level !== "auto" && ticket.amount !== null ? "approval" : ticket.kind;
}

function fmtDuration(seconds) {
  const s = Math.max(0, Math.round(Math.abs(seconds)));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return h ? `${h}:${String(m).padStart(2, "0")}:${String(r).padStart(2, "0")}` : `${m}:${String(r).padStart(2, "0")}`;
}

function slaCell(cell, dueIso) {
  const left = (Date.parse(dueIso) - Date.now()) / 1000;
  cell.textContent = left >= 0 ? fmtDuration(left) : t("overdue", { t: fmtDuration(left) });
  cell.className = `sla ${left < 0 ? "sla-late" : left < 120 ? "sla-soon" : "sla-ok"}`;
}

function tickClocks() {
  for (const cell of document.querySelectorAll("#queue-rows .sla[data-due]")) slaCell(cell, cell.dataset.due);
  for (const cell of document.querySelectorAll("#queue-rows .wait[data-created]")) waitCell(cell, cell.dataset.created);
}

function shortId(id) { return id.slice(0, 8); }

function waitCell(node, createdIso) {
  node.textContent = t("waiting", { t: fmtDuration((Date.now() - Date.parse(createdIso)) / 1000) });
}

function renderQueue() {
  const rows = document.createDocumentFragment();
  for (const tk of state.tickets) {
    state.channels.add(tk.channel);
    state.teams.add(tk.team);
    for (const g of tk.tags || []) state.tags.add(g);
    const kind = kindOf(tk);
    const mine = tk.claimed_by && state.me && tk.claimed_by === state.me.id;
    // the SLA is the deadline for a person to pick the ticket up: once claimed it no longer runs
    const sla = tk.status === "queued" ? el("span", { class: "sla", "data-due": tk.sla_due_at }) : el("span", { class: "sla muted", text: t("none") });
    if (tk.status === "queued") slaCell(sla, tk.sla_due_at);
    const wait = el("span", { class: "wait", "data-created": tk.created_at });
    waitCell(wait, tk.created_at);
    const status = tk.status === "claimed" ? `${t("claimedSt")}${mine ? ` (${t("you")})` : ""}` : t(`${tk.status}`);
    const reason = (tk.reason_text && tk.reason_text[state.lang]) || tk.reason;
    const open = el("button", { type: "button", class: "qopen", "aria-label": `Open ticket ${shortId(tk.id)}`,
                                "data-ticket": tk.id, "data-action": "open" },
      el("span", { class: "qline" },
        el("strong", { class: "qwho", text: tk.customer_name || tk.customer_id }),
        wait),
      el("span", { class: "qreason", text: reason, title: tk.reason }),
      tk.last_message ? el("span", { class: "qlast", text: `“${tk.last_message}”` }) : null,
      (tk.tags || []).length || tk.hold ? el("span", { class: "qtags" },
        tk.hold ? el("span", { class: `pill hold-${tk.hold}`, text: t(tk.hold), "data-hold": tk.hold }) : null,
        ...(tk.tags || []).map((g) => el("span", { class: "tag", text: g }))) : null,
      el("span", { class: "qmeta" },
        el("span", { class: `pill p-${tk.priority}`, text: t(tk.priority) }),
        el("span", { class: `pill k-${kind}`, text: t(kind), "data-kind": kind }),
        el("span", { class: "qwhere", text: [tk.team, tk.channel, tk.language || t("none"), status].join(" · ") }), sla));
    const claimBtn = tk.status === "queued"
      ? el("button", { type: "button", class: "small qclaim", "aria-label": `Claim ticket ${shortId(tk.id)}`,
                       "data-ticket": tk.id, "data-action": "claim", text: t("claim") }) : null;
    const current = state.current && state.current.id === tk.id;
    rows.append(el("li", { "data-ticket": tk.id, "data-status": tk.status,
                           class: ["qrow", mine ? "mine" : "", current ? "current" : ""].join(" ").trim(),
                           "aria-current": current ? "true" : null }, open, claimBtn));
  }
  $("queue-rows").replaceChildren(rows);
  $("queue-count").textContent = `(${state.tickets.length})`;
  $("queue-empty").hidden = state.tickets.length > 0;
  $("queue-empty").textContent = filtersActive() ? t("noMatch") : t("queueEmpty");
  fillSelect("f-channel", state.channels);
  fillSelect("f-tag", state.tags);
  fillSelect("f-team", state.me && ["supervisor", "admin"].includes(state.me.role) ? state.teams : (state.me ? state.me.teams : []));
}

async function claimNext() {
  try {
    const ticket = await api("/v1/handoff/claim-next", { method: "POST", body: {} });
    if (!ticket) { notify(t("nothingToClaim", { teams: state.me.teams.join(", ") })); return; }
    notify(t("claimed"), "ok");
    await showTicket(ticket.id);
    scheduleRefresh();
  } catch (err) { if (err.status !== 401) notify(err.message, "error"); }
}

async function claim(id) {
  try {
    await api(`/v1/handoff/tickets/${id}/claim`, { method: "POST" });
    notify(t("claimed"), "ok");
    await showTicket(id);
    scheduleRefresh();
  } catch (err) { if (err.status !== 401) notify(err.message, "error"); }
}

// -- the live stream (fetch, so the Bearer token goes in a header; EventSource cannot send one) ------

function setLive(on) {
  const live = $("live");
  live.hidden = false;
  live.textContent = on ? t("live") : t("reconnecting");
  live.className = `live ${on ? "on" : "off"}`;
  live.dataset.state = on ? "live" : "reconnecting";
}

function openStream() {
  const ctl = new AbortController();
  state.stream = ctl;
  let retryMs = 3000;
  const run = async () => {
    while (!ctl.signal.aborted) {
      try {
        const headers = { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" };
        if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
        const resp = await fetch("/v1/handoff/events", { headers, signal: ctl.signal, cache: "no-store" });
        if (resp.status === 401) { signOut(t("signedOutRevoked")); return; }
        if (!resp.ok || !resp.body) throw new Error(`HTTP ${resp.status}`);
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        let ev = { event: "message", id: null, data: [] };
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let nl;
          while ((nl = buffer.indexOf("\n")) >= 0) {
            const line = buffer.slice(0, nl).replace(/\r$/, "");
            buffer = buffer.slice(nl + 1);
            if (line === "") {
              if (ev.data.length || ev.event !== "message") {
                const stop = onStreamEvent(ev.event, ev.id, ev.data.join("\n"));
                if (stop) { ctl.abort(); return; }
              }
              ev = { event: "message", id: null, data: [] };
            } else if (line.startsWith(":")) {
              continue;
            } else {
              const i = line.indexOf(":");
              const field = i < 0 ? line : line.slice(0, i);
              const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
              if (field === "event") ev.event = val;
              else if (field === "data") ev.data.push(val);
              else if (field === "id") ev.id = val;
              else if (field === "retry" && /^\d+$/.test(val)) retryMs = Number(val);
            }
          }
        }
      } catch (err) {
        if (ctl.signal.aborted) return;
      }
      if (ctl.signal.aborted) return;
      setLive(false);
      await new Promise((r) => setTimeout(r, retryMs));
      if (!ctl.signal.aborted) scheduleRefresh();   // whatever the replay misses, the list is current
    }
  };
  run();
}

function onStreamEvent(event, id, data) {
  let payload = null;
  try { payload = data ? JSON.parse(data) : null; } catch { payload = null; }
  if (id) state.lastEventId = id;
  if (event === "ready") { setLive(true); return false; }
  if (event === "end") { signOut(t("signedOutRevoked")); return true; }
  if (event === "resync") { scheduleRefresh(); return false; }
  if (event === "ticket" && payload) {
    scheduleRefresh();
    if (state.current && state.current.id === payload.ticket_id) refreshTicket();
  }
  return false;
}

// -- the ticket ---------------------------------------------------------------------------------

async function showTicket(id) {
  const [ticket, events, convo, pending, understood] = await Promise.all([
    api(`/v1/handoff/tickets/${id}`),
    api(`/v1/handoff/tickets/${id}/events?limit=500`),
    api(`/console/api/tickets/${id}/conversation`),
    api(`/v1/handoff/tickets/${id}/pending-action`).catch(() => ({ pending: null })),
    api(`/console/api/tickets/${id}/understanding`).catch(() => ({ items: [] })),
  ]);
  state.understood = understood.items;
  // a ticket opened by a workflow (an approval) carries no shop view of the customer: asked for once per ticket
  // (a ticket's own memory still loading says so in its package: it is shown when it comes, not asked for twice)
  if (!(ticket.context || {}).memory && !(ticket.context || {}).memory_status
      && (!state.customer || state.customer.id !== id)) {
    const out = await api(`/console/api/tickets/${id}/customer`).catch(() => ({ memory: null }));
    state.customer = { id, memory: out.memory };
  }
  const samePending = state.pending && pending.pending && state.pending.instance_id === pending.pending.instance_id;
  state.pending = pending.pending;
  if (!state.current || state.current.id !== id) {
    state.replyKey = null;
    state.draftKey = null;
    state.revealed = {};
    $("reply-text").value = "";
    $("reject-reason").value = "";
    $("ap-reason").value = "";
    $("edit-box").hidden = true;
    $("pa-result").hidden = true;
  }
  if (!samePending) { state.paKey = null; $("pa-fields").replaceChildren(); }
  state.current = ticket;
  state.events = events.items;
  state.convo = convo;
  renderTicket();
  $("ticket").hidden = false;
  $("no-ticket").hidden = true;
  markCurrent();
  syncHeartbeat();
  awaitMemory(ticket);
}

// a ticket whose session memory is still to come: reading it starts the load (the first agent to open it); the
// ticket is read again a few times (backing off) until it is there or the shop's answer is known
function awaitMemory(ticket) {
  clearTimeout(state.memoryPoll);
  if ((ticket.context || {}).memory_status !== "pending") { state.memoryTries = null; return; }
  const tries = state.memoryTries && state.memoryTries.id === ticket.id ? state.memoryTries.n : 0;
  if (tries >= 6) return;
  state.memoryTries = { id: ticket.id, n: tries + 1 };
  state.memoryPoll = setTimeout(() => {
    if (state.current && state.current.id === ticket.id) refreshTicket();
  }, 1000 * 2 ** tries);
}

async function refreshTicket() {
  if (!state.current) return;
  try { await showTicket(state.current.id); } catch (err) { if (err.status !== 401) notify(err.message, "error"); }
}

function closeTicket() {
  state.current = null;
  state.revealed = {};
  stopHeartbeat();
  $("ticket").hidden = true;
  $("no-ticket").hidden = false;
  markCurrent();
}

function markCurrent() {
  for (const li of document.querySelectorAll("#queue-rows li[data-ticket]")) {
    const on = !!state.current && li.dataset.ticket === state.current.id;
    li.classList.toggle("current", on);
    if (on) li.setAttribute("aria-current", "true"); else li.removeAttribute("aria-current");
  }
}

function holdsCurrent() {
  return state.current && state.me && state.current.status === "claimed" && state.current.claimed_by === state.me.id;
}

function stopHeartbeat() {
  if (state.heartbeat) clearTimeout(state.heartbeat);
  state.heartbeat = null;
}

function syncHeartbeat() {
  stopHeartbeat();
  if (!holdsCurrent()) return;
  const expires = Date.parse(state.current.lease_expires_at);
  const wait = Math.max(2000, Math.min(30000, (expires - Date.now()) / 3));
  state.heartbeat = setTimeout(beat, wait);
}

async function beat() {
  if (!holdsCurrent()) return;
  try {
    const hb = await api(`/v1/handoff/tickets/${state.current.id}/heartbeat`, { method: "POST" });
    state.current.lease_expires_at = hb.lease_expires_at;
    document.body.dataset.heartbeats = String(Number(document.body.dataset.heartbeats || 0) + 1);
    renderMeta();
    syncHeartbeat();
  } catch (err) {
    if (err.status === 409) { notify(t("leaseLost"), "error"); refreshTicket(); }
    else if (err.status !== 401) syncHeartbeat();
  }
}

function mayApprove(ticket) {
  if (!ticket.approval_level) return true;
  return LEVELS.indexOf(state.me.approval_level) >= LEVELS.indexOf(ticket.approval_level);
}

function dd(list, label, value) {
  if (value === null || value === undefined || value === "") return;
  list.append(el("dt", { text: label }), el("dd", { text: String(value) }));
}

function fmtTime(iso) { return iso ? new Date(iso).toLocaleString(state.lang === "zh" ? "zh-CN" : "en-GB") : ""; }

function renderMeta() {
  const tk = state.current;
  const meta = $("t-meta");
  meta.replaceChildren();
  dd(meta, t("kind"), t(kindOf(tk)));
  dd(meta, t("status"), tk.status === "claimed" ? `${t("claimedSt")} · ${t("heldBy")} ${tk.claimed_by === state.me.id ? t("you") : tk.claimed_by}` : t(`${tk.status}${tk.status === "queued" ? "" : "St"}`));
  dd(meta, t("priority"), t(tk.priority));
  dd(meta, t("team"), tk.team);
  dd(meta, t("channel"), tk.channel);
  dd(meta, t("language"), tk.language);
  dd(meta, t("customer"), tk.customer_name ? `${tk.customer_name} (${tk.customer_id})` : tk.customer_id);
  dd(meta, t("created"), fmtTime(tk.created_at));
  dd(meta, t("sla"), fmtTime(tk.sla_due_at));
  if (holdsCurrent()) dd(meta, t("lease"), fmtTime(tk.lease_expires_at));
}

function renderTicket() {
  const tk = state.current;
  const ctx = tk.context || {};
  const held = holdsCurrent();
  $("t-id").textContent = shortId(tk.id);
  $("ticket").dataset.ticket = tk.id;
  $("ticket").dataset.status = tk.status;
  $("claim-this").hidden = tk.status !== "queued";
  $("t-reason").textContent = (tk.reason_text && tk.reason_text[state.lang]) || tk.reason;
  $("t-reason").title = tk.reason;
  $("t-who").textContent = tk.customer_name || tk.customer_id;
  renderMeta();
  renderDesk(tk, held);
  renderPending(tk, held);

  // approval: amount, currency, the level needed and the agent's own
  const needsApproval = tk.amount !== null && tk.approval_level;
  $("approval").hidden = !needsApproval;
  const allowed = mayApprove(tk);
  if (needsApproval) {
    $("ap-title").textContent = tk.approval_level === "auto" ? t("amountTitle") : t("approvalTitle");
    $("ap-amount").textContent = `${t("amount")}: ${tk.amount} ${tk.currency || ""}`.trim();
    $("ap-level").textContent = levelName(tk.approval_level);
    $("ap-mine").textContent = levelName(state.me.approval_level);
    $("ap-refuse").hidden = allowed;
    $("ap-refuse").textContent = allowed ? "" : refusal(tk);
  }
  renderApprovalDecision(tk, needsApproval && tk.kind === "approval", allowed, held);

  // the draft
  const draft = tk.kind === "approval" ? null : tk.draft;   // an approval's decision is made in its own panel
  $("draft-box").hidden = !draft;
  if (draft) {
    $("draft-status").textContent = t("draftStatus", { s: tk.draft_status ? t(`d_${tk.draft_status}`) : "" });
    $("draft-text").textContent = draft.final_text || draft.text || t("noDraft");
    const cites = (draft.citations || []).map((c) => el("li", { text: citation(c) }));
    $("draft-cites").replaceChildren(...cites);
    $("draft-action").textContent = draft.proposed_action || draft.action || "";
    const pending = tk.draft_status === "pending" && held;
    for (const id of ["approve", "edit-send"]) {
      const b = $(id);
      b.disabled = !pending || !allowed;
      if (!allowed) b.setAttribute("aria-describedby", "ap-refuse"); else b.removeAttribute("aria-describedby");
    }
    $("approve").disabled = $("approve").disabled || !draft.text;
    $("edit-toggle").disabled = !pending || !allowed;
    $("reject").disabled = !pending;
    $("reject-reason").disabled = !pending;
    if (!$("edit-text").value) $("edit-text").value = draft.text || "";
  }

  // transcript: the package's (up to the escalation), then what was said since
  const lines = [];
  const seen = new Set();
  for (const m of ctx.transcript || []) {
    lines.push({ sender: m.sender, text: m.text, at: m.at, personal: m.personal });
    seen.add(`${m.sender}|${m.text}|${m.at}`);
  }
  const since = (state.convo && state.convo.messages) || [];
  const firstAt = lines.length ? Date.parse(lines[lines.length - 1].at) : 0;
  for (const m of since) {
    if (Date.parse(m.at) <= firstAt && lines.some((l) => l.sender === m.sender && l.text === m.text)) continue;
    lines.push({ sender: m.sender, text: m.text, at: m.at, personal: m.personal });
  }
  // masked values (138****0000): a permitted agent reveals one at a time, for a reason the server records
  const reveals = (m) => (state.me.can_reveal && (m.personal || []).length ? [el("span", { class: "reveals" },
    ...m.personal.map((p) => state.revealed[p.ref] !== undefined
      ? el("span", { class: "revealed", text: `${p.shown} = ${state.revealed[p.ref]}` })
      : el("button", { type: "button", class: "reveal", "data-ref": p.ref, text: `${t("reveal")} ${p.shown}` })))] : []);
  $("transcript").replaceChildren(...lines.map((m) => el("li", { class: m.sender },
    el("span", { class: "who-line", text: m.at ? `${t(`s_${m.sender}`)} · ${fmtTime(m.at)}` : t(`s_${m.sender}`) }), m.text,
    ...reveals(m))));

  // outbox: delivery rows of the conversation since the ticket opened
  const ob = ((state.convo && state.convo.outbox) || []).map((o) => el("tr", { "data-outbox": o.id },
    el("td", { text: String(o.id) }), el("td", { text: o.kind }), el("td", { text: o.text || "" }),
    el("td", { text: o.status }), el("td", { text: String(o.attempts) })));
  $("outbox-rows").replaceChildren(...ob);

  renderUnderstood();
  renderDecisions(ctx.decisions || []);
  renderEvidence(ctx.evidence || []);
  renderFacts(tk, ctx);
  const flow = {};
  for (const k of ["flow", "workflow", "flow_state", "tool_call", "proposed_tool_call", "kept_requests"]) if (ctx[k]) flow[k] = ctx[k];
  if (draft && draft.tool_call) flow.tool_call = draft.tool_call;
  $("flow-box").hidden = Object.keys(flow).length === 0;
  $("flow").textContent = JSON.stringify(flow, null, 2);

  $("events").replaceChildren(...(state.events || []).map((e) => el("li", {
    text: `${fmtTime(e.at)} · ${e.action} · ${e.agent || e.actor}${e.payload && e.payload.reason ? ` · ${e.payload.reason}` : ""}${e.payload && e.payload.text ? ` · ${e.payload.text}` : ""}` })));

  // the reply box in the conversation's language: the browser's spelling and input follow it
  const convLang = tk.language || "";
  $("reply-text").lang = convLang === "zh" ? "zh-CN" : convLang;
  $("reply-title").textContent = convLang ? `${t("reply")} · ${LANG_NAMES[convLang] || convLang}` : t("reply");
  const open = tk.status === "queued" || tk.status === "claimed";
  $("send").disabled = !held;
  $("reply-text").disabled = !held;
  $("transfer").disabled = !(held || (open && ["supervisor", "admin"].includes(state.me.role)));
  // an approval closes only by a decision or a cancel: the server answers 409 to resolve and return-to-bot
  const approval = tk.kind === "approval";
  $("resolve").disabled = approval || !(held || (open && ["supervisor", "admin"].includes(state.me.role)));
  $("return-bot").disabled = $("resolve").disabled;
  $("close-approval").hidden = !(approval && open);
}

// tags, waiting status, assignment, notes and macros: the desk around the conversation
function renderDesk(tk, held) {
  const open = tk.status === "queued" || tk.status === "claimed";
  const sup = ["supervisor", "admin"].includes(state.me.role);
  $("hold").value = tk.hold || "";
  $("hold").disabled = !(open && (held || (sup && tk.status === "claimed")));
  $("tags").replaceChildren(...(tk.tags || []).map((g) => el("span", { class: "tag", role: "listitem" }, g,
    el("button", { type: "button", "data-tag": g, "aria-label": t("removeTag", { t: g }), text: "×" }))));
  $("assign").disabled = $("assign-to").disabled = !(open && (held || sup));
  $("notes").replaceChildren(...(state.events || []).filter((e) => e.action === "note").map((e) => el("li", {},
    el("span", { class: "who-line", text: `${e.agent || e.actor} · ${fmtTime(e.at)}` }), (e.payload || {}).text || "")));
  const lang = tk.language || "en";
  const macros = state.macros.filter((m) => m.language === lang);
  const pick = $("macro");
  pick.replaceChildren(el("option", { value: "", text: t("macroPick") }),
    ...macros.map((m) => el("option", { value: m.name, text: m.title })));
  pick.disabled = !held;
}

// a flow the bot stopped (a change of address waiting for the customer's yes): its action with the values,
// the editable ones as inputs (masked values stay masked unless the agent types a new one), one click to confirm
function renderPending(tk, held) {
  const p = state.pending;
  $("pa-box").hidden = !p && $("pa-result").hidden;
  $("pa-form").hidden = !p;
  if (!p) return;
  $("pa-what").textContent = t("paWhat", { workflow: p.workflow, summary: p.summary || p.tool });
  const fields = $("pa-fields");
  if (!fields.children.length) {
    for (const [name, value] of Object.entries(p.arguments)) {
      const id = `pa-arg-${name}`;
      const editable = p.editable.includes(name);
      fields.append(el("label", { for: id, text: name }),
        el("input", { id, type: "text", maxlength: "500", value: String(value ?? ""), "data-arg": name,
                      "data-original": String(value ?? ""), readonly: editable ? null : true,
                      "aria-label": `${p.tool} ${name}` }));
    }
  }
  $("pa-masked").hidden = !p.masked.length;
  $("pa-masked").textContent = p.masked.length ? t("paMasked", { args: p.masked.join(", ") }) : "";
  $("pa-confirm").disabled = !held;
  $("pa-confirm").title = held ? "" : t("paClaimFirst");
}

async function confirmPending() {
  const p = state.pending;
  if (!p || !state.current) return;
  const args = {};
  for (const input of document.querySelectorAll("#pa-fields input[data-arg]")) {
    const v = input.value.trim();
    if (!input.readOnly && v && v !== input.dataset.original) args[input.dataset.arg] = v;
  }
  state.paKey = state.paKey || newKey();
  try {
    const out = await api(`/v1/handoff/tickets/${state.current.id}/pending-action/confirm`,
                          { method: "POST", body: { instance_id: p.instance_id, arguments: args }, key: state.paKey });
    const r = out.result || {};
    const tools = (r.tools || []).map((x) => `${x.step} ${x.status}`).join(", ") || p.tool;
    const ok = (r.tools || []).every((x) => x.status === "ok") && r.status !== "failed";
    $("pa-result").textContent = ok ? t("paDone", { tools, reply: r.reply || "" })
                                    : t("paFailed", { tools, status: r.status || "", reply: r.reply || "" });
    $("pa-result").className = `pa-result ${ok ? "" : "bad"}`;
    $("pa-result").hidden = false;
    state.paKey = null;
    await refreshTicket();
  } catch (err) {
    if (err.status === 409) { notify(t("paGone"), "error"); state.paKey = null; refreshTicket(); }
    else if (err.status !== 401) notify(err.message, "error");
  }
}

async function loadDeskLists() {
  try {
    const [macros, colleagues] = await Promise.all([api("/v1/handoff/macros"), api("/v1/handoff/agents")]);
    state.macros = macros.items;
    state.macroVars = macros.variables || [];
    renderMacroEditor();
    state.colleagues = colleagues.items;
    $("colleagues").replaceChildren(...state.colleagues.map((a) => el("option", { value: a.name,
      label: [a.display_name, a.teams.join(", ")].filter(Boolean).join(" · ") })));
  } catch { /* the desk works without them; a 401 signs out in api() */ }
}

// -- the macro editor (supervisors and admins): list, create, edit, delete; the server validates ---------

function renderMacroEditor() {
  $("me-vars").textContent = t("meVars", { vars: state.macroVars.map((v) => `{${v}}`).join(" ") });
  const rows = state.macros.map((m) => el("tr", { "data-macro": `${m.name}/${m.language}` },
    el("td", { text: m.name }), el("td", { text: m.language }), el("td", { text: m.title }),
    el("td", { text: m.team || t("meAllTeams") }), el("td", { class: "me-body", text: m.body }),
    el("td", {}, el("button", { type: "button", class: "small", "data-edit": `${m.name}/${m.language}`,
                                "aria-label": `${t("meEdit")} ${m.name} ${m.language}`, text: t("meEdit") }),
      " ", el("button", { type: "button", class: "small danger", "data-delete": `${m.name}/${m.language}`,
                          "aria-label": `${t("meDelete")} ${m.name} ${m.language}`, text: t("meDelete") }))));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "6", class: "muted", text: t("meEmpty") })));
  $("me-table").tBodies[0].replaceChildren(...rows);
}

function macroForm(m) {
  $("me-name").value = m ? m.name : "";
  $("me-lang").value = m ? m.language : (state.lang === "zh" ? "zh" : "en");
  $("me-title").value = m ? m.title : "";
  $("me-team").value = m ? (m.team || "") : "";
  $("me-body").value = m ? m.body : "";
  showMacroErrors([]);
  (m ? $("me-body") : $("me-name")).focus();
}

// the problem's invalid fields, listed and marked on their inputs (name and language come from the path)
function showMacroErrors(fields) {
  const input = { name: "me-name", language: "me-lang", title: "me-title", team: "me-team", body: "me-body" };
  for (const id of Object.values(input)) $(id).removeAttribute("aria-invalid");
  for (const f of fields) if (input[f.field]) $(input[f.field]).setAttribute("aria-invalid", "true");
  $("me-errors").replaceChildren(...fields.map((f) => el("li", { "data-field": f.field, text: `${f.field}: ${f.msg}` })));
  $("me-errors").hidden = !fields.length;
}

async function saveMacro() {
  const name = $("me-name").value.trim();
  const lang = $("me-lang").value;
  const body = { title: $("me-title").value, body: $("me-body").value, team: $("me-team").value.trim() || null };
  try {
    await api(`/v1/handoff/macros/${encodeURIComponent(name || "-")}/${encodeURIComponent(lang)}`, { method: "PUT", body });
    showMacroErrors([]);
    notify(t("meSaved", { name, lang }), "ok");
    await loadDeskLists();
    if (state.current) renderTicket();
  } catch (err) {
    if (err.status === 401) return;
    const fields = err.fields && err.fields.length ? err.fields : [{ field: "request", msg: err.message }];
    showMacroErrors(fields);
    notify(err.message, "error");
  }
}

async function deleteMacro(key) {
  const [name, lang] = key.split("/");
  if (!window.confirm(t("meConfirmDelete", { name, lang }))) return;
  try {
    await api(`/v1/handoff/macros/${encodeURIComponent(name)}/${encodeURIComponent(lang)}`, { method: "DELETE" });
    notify(t("meDeleted", { name, lang }), "ok");
    await loadDeskLists();
    if (state.current) renderTicket();
  } catch (err) { if (err.status !== 401) notify(err.message, "error"); }
}

function wireMacroEditor() {
  const toggle = (open) => {
    $("macro-editor").hidden = !open;
    $("manage-macros").setAttribute("aria-expanded", String(open));
    if (open) { renderMacroEditor(); macroForm(null); }
  };
  $("manage-macros").addEventListener("click", () => toggle($("macro-editor").hidden));
  $("me-close").addEventListener("click", () => { toggle(false); $("manage-macros").focus(); });
  $("me-new").addEventListener("click", () => macroForm(null));
  $("me-form").addEventListener("submit", (e) => { e.preventDefault(); saveMacro(); });
  $("me-table").addEventListener("click", (e) => {
    const edit = e.target.closest("button[data-edit]");
    const del = e.target.closest("button[data-delete]");
    if (edit) macroForm(state.macros.find((m) => `${m.name}/${m.language}` === edit.dataset.edit));
    else if (del) deleteMacro(del.dataset.delete);
  });
}

function levelName(level) { return T.en[`lv_${level}`] ? t(`lv_${level}`) : level; }

function refusal(tk) {
  const needs = t(`needs_${tk.approval_level}`);
  if (tk.kind === "approval") return t("apRefuse", { needs, mine: levelName(state.me.approval_level) });
  return `${needs}. ${t("refuseLevel", { need: tk.approval_level, mine: state.me.approval_level })}`;
}

function callText(call) {
  if (!call || !call.tool) return "";
  const args = Object.entries(call.arguments || {}).map(([k, v]) => `${k}=${scalar(v)}`).join(", ");
  return `${call.tool}(${args})`;
}

// An approval ticket: a workflow waits for this decision. What is being approved, the buttons (for an agent at
// the level, holding the ticket) or why they are off, and once decided, who decided and what became of it.
function renderApprovalDecision(tk, isApproval, allowed, held) {
  for (const id of ["ap-details", "ap-actions", "ap-hint", "ap-result"]) $(id).hidden = true;
  if (!isApproval) return;
  const ap = (tk.context || {}).approval || {};
  const draft = tk.draft || {};
  const details = $("ap-details");
  details.replaceChildren();
  dd(details, t("apOrder"), ap.order);
  dd(details, t("apCall"), callText(ap.proposed_call || draft.action) || draft.proposed_action);
  const ev = ap.evidence || {};
  dd(details, t("apShop"), Object.entries(ev).map(([k, v]) => `${T.en[`ev_${k}`] ? t(`ev_${k}`) : k} ${scalar(v)}`).join(" · "));
  const asked = ((state.convo && state.convo.messages) || []).filter((m) => m.sender === "customer")
    .map((m) => `“${m.text}”`).join(" · ");
  dd(details, t("apRequest"), asked);
  dd(details, t("apWorkflow"), [ap.workflow, ap.step].filter(Boolean).join(" › "));
  details.hidden = !details.children.length;

  const pending = tk.draft_status === "pending" && (tk.status === "queued" || tk.status === "claimed");
  $("ap-actions").hidden = !pending;
  $("ap-approve").disabled = $("ap-reject").disabled = $("ap-reason").disabled = !(pending && held && allowed);
  const why = !allowed ? refusal(tk) : !held ? t("apClaimFirst") : "";
  for (const id of ["ap-approve", "ap-reject"]) $(id).title = why;
  $("ap-hint").hidden = !pending || !allowed || held;
  $("ap-hint").textContent = allowed && !held ? t("apClaimFirst") : "";

  const decided = [...(state.events || [])].reverse().find((e) => ["approved", "rejected", "cancelled"].includes(e.action));
  if (!pending && decided) {
    const p = decided.payload || {};
    const flow = (p.workflow && p.workflow.workflow) || {};
    const status = [flow.status, flow.status === "waiting" && flow.step, p.workflow && p.workflow.outcome]
      .filter(Boolean).join(", ") || tk.status;
    const who = decided.agent === state.me.id || decided.agent === state.me.name ? t("you") : (decided.agent || decided.actor);
    $("ap-result").textContent = t(`apDecided_${decided.action}`, { who, status, reason: p.reason ? ` (${p.reason})` : "" });
    $("ap-result").hidden = false;
  }
}

function citation(c) {
  const parts = [c.title, c.section].filter(Boolean).join(" › ");
  return `${parts || c.doc_id || c.chunk_id}${c.source ? ` — ${c.source}` : ""}${c.score !== undefined ? ` (${Number(c.score).toFixed(3)})` : ""}`;
}

function scalar(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "object" && "value" in v) return [v.value, v.currency || v.unit].filter((x) => x !== undefined && x !== null).join(" ");
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

function renderDecisions(decisions) {
  const items = decisions.map((d) => {
    const dec = d.decision || {};
    const ex = dec.explanation || {};
    const head = [dec.tier, dec.intent && `${t("intent")}: ${dec.intent}`, dec.channel && `${t("by")} ${dec.channel}`,
                  dec.confidence !== null && dec.confidence !== undefined && `${t("confidence")} ${Number(dec.confidence).toFixed(3)}`]
      .filter(Boolean).join(" · ");
    const li = el("li", { class: "decision" }, el("strong", { text: head || d.state || "" }));
    if (ex.rule && typeof ex.rule === "object") {
      const r = ex.rule;
      li.append(el("div", { class: "rule", text: `${t("ruleHit")}: ${[r.name || r.id || r.intent, r.pattern && `/${r.pattern}/`, r.matched && `“${r.matched}”`].filter(Boolean).join(" ")}` }));
    } else if (typeof ex.rule === "string") {
      li.append(el("div", { class: "rule", text: `${t("ruleHit")}: ${ex.rule}${ex.matched ? ` “${scalar(ex.matched)}”` : ""}` }));
    }
    if (Array.isArray(ex.nearest) && ex.nearest.length) {
      const table = el("table", { "aria-label": "Nearest examples" });
      for (const n of ex.nearest) {
        table.append(el("tr", {}, el("td", { class: "score", text: Number(n.score).toFixed(3) }),
                        el("td", { text: n.intent }), el("td", { text: n.example })));
      }
      li.append(el("div", { text: `${t("nearest")} (${ex.method || ""}, ${t("confidence")} ${scalar(ex.score)} / threshold ${scalar(ex.threshold)})` }), table);
    }
    if (dec.escalation) {
      li.append(el("div", { class: "escalation", text: `${t("escalation")}: ${dec.escalation.rule} — ${dec.escalation.reason} (${dec.escalation.priority})` }));
    }
    const rest = Object.entries(ex).filter(([k]) => !["rule", "nearest", "channel", "signals"].includes(k));
    if (rest.length && !ex.nearest) li.append(el("div", { class: "muted", text: rest.map(([k, v]) => `${k}: ${scalar(v)}`).join(" · ") }));
    return li;
  });
  $("decisions").replaceChildren(...items);
}

// one sentence per turn (and per action run outside a turn), in the agent's language; the raw trail stays folded
function renderUnderstood() {
  const items = state.understood || [];
  $("understood").replaceChildren(...items.map((u) => el("li", { class: `und-${u.kind}`, "data-kind": u.kind },
    el("span", { class: "who-line", text: [fmtTime(u.at), u.said ? `“${u.said}”` : null].filter(Boolean).join(" · ") }),
    el("span", { class: "und-text", text: (u.text && (u.text[state.lang] || u.text.en)) || "" }))));
  if (!items.length) $("understood").append(el("li", { class: "muted", text: t("undNone") }));
}

function renderEvidence(evidence) {
  $("evidence").replaceChildren(...evidence.map((h) => el("li", {},
    el("span", { class: "cite", text: citation({ ...h, score: h.score }) }),
    el("span", { class: "snippet", text: (h.text || "").slice(0, 280) }))));
}

// the customer as the shop knows them (the session memory: profile, recent orders, earlier outcomes) and the
// facts the package carries
function renderFacts(tk, ctx) {
  const list = $("facts");
  list.replaceChildren();
  const memory = ctx.memory || (state.customer && state.customer.id === tk.id && state.customer.memory) || {};
  const profile = memory.profile || {};
  const loading = { pending: "memPending", partial: "memPartial", unavailable: "memUnavailable" }[ctx.memory_status];
  if (loading) dd(list, t("shopView"), t(loading));
  dd(list, t("name"), tk.customer_name || (memory.profile || {}).name);
  dd(list, t("customerId"), tk.customer_id);
  dd(list, t("phone"), profile.phone);
  const known = (prefix, v) => (T.en[`${prefix}${v}`] ? t(`${prefix}${v}`) : v);   // a word of ours, else as given
  const orders = (memory.orders || []).map((o) => [o.order_id || o.id, o.status && known("os_", o.status),
                                                   o.total !== undefined ? scalar(o.total) : null]
    .filter((x) => x !== null && x !== undefined && x !== "").join(" "));
  if (orders.length) dd(list, t("orders"), orders.join(" · "));
  const outcomes = (memory.outcomes || []).map((o) => [o.workflow || o.kind, o.outcome || o.status].filter(Boolean).join(": "));
  if (outcomes.length) dd(list, t("earlier"), outcomes.join(" · "));
  const facts = { ...(ctx.customer_facts || {}), ...(ctx.customer || {}) };
  for (const [k, v] of Object.entries(facts)) {
    if (["customer_id", "name"].includes(k)) continue;
    if (v === null || v === undefined || v === false || (Array.isArray(v) && !v.length)) continue;
    dd(list, known("f_", k), Array.isArray(v) ? v.map(scalar).join(", ") : scalar(v));
  }
}

async function act(fn, okMessage) {
  try {
    await fn();
    if (okMessage) notify(okMessage, "ok");
    await refreshTicket();
    scheduleRefresh();
  } catch (err) {
    if (err.status !== 401) notify(err.message, "error");
    if (err.status === 409) refreshTicket();
  }
}

function wire() {
  $("signin-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token").value.trim();
    if (token) signIn(token);
  });
  $("sign-out").addEventListener("click", () => { signOut(); notify(t("signedOut")); });
  $("lang").addEventListener("click", () => {
    state.lang = state.lang === "zh" ? "en" : "zh";
    localStorage.setItem(LANG_KEY, state.lang);
    applyLanguage();
  });
  $("claim-next").addEventListener("click", claimNext);
  $("refresh").addEventListener("click", () => loadQueue().catch((err) => err.status !== 401 && notify(err.message, "error")));
  $("queue-rows").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-ticket]");
    if (!b) return;
    if (b.dataset.action === "claim") claim(b.dataset.ticket);
    else showTicket(b.dataset.ticket).catch((err) => err.status !== 401 && notify(err.message, "error"));
  });
  $("claim-this").addEventListener("click", () => state.current && claim(state.current.id));
  // search and filters: each change asks the server for the list again (a search waits for a pause in typing)
  const reload = () => loadQueue().catch((err) => err.status !== 401 && notify(err.message, "error"));
  let typing = null;
  $("q").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { state.filters.q = $("q").value.trim(); reload(); }, 250);
  });
  $("queue-filters").addEventListener("submit", (e) => { e.preventDefault(); clearTimeout(typing); state.filters.q = $("q").value.trim(); reload(); });
  for (const sel of document.querySelectorAll("#queue-filters select[data-filter]")) {
    sel.addEventListener("change", () => { state.filters[sel.dataset.filter] = sel.value; reload(); });
  }
  for (const b of document.querySelectorAll("#queue-filters button.view")) {
    b.addEventListener("click", () => {
      state.filters.view = b.dataset.view;
      for (const o of document.querySelectorAll("#queue-filters button.view")) o.setAttribute("aria-pressed", String(o === b));
      reload();
    });
  }
  document.addEventListener("keydown", onShortcut);
  $("hold").addEventListener("change", () => {
    const hold = $("hold").value || null;
    act(() => api(path("hold"), { method: "POST", body: { hold } }),
        t("holdSet", { s: hold ? t(hold) : t("hOpen") }));
  });
  const addTag = () => {
    const tag = $("tag-input").value.trim();
    if (!tag) return;
    $("tag-input").value = "";
    act(() => api(path("tags"), { method: "POST", body: { add: [tag] } }));
  };
  $("tag-add").addEventListener("click", addTag);
  $("tag-input").addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); addTag(); } });
  $("tags").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-tag]");
    if (b) act(() => api(path("tags"), { method: "POST", body: { remove: [b.dataset.tag] } }));
  });
  $("assign").addEventListener("click", () => {
    const who = $("assign-to").value.trim();
    if (!who) { notify(t("needAgent"), "error"); return; }
    act(async () => { await api(path("transfer"), { method: "POST", body: { agent: who } }); $("assign-to").value = ""; },
        t("assigned", { who }));
  });
  $("pa-form").addEventListener("submit", (e) => { e.preventDefault(); confirmPending(); });
  $("note-add").addEventListener("click", () => {
    const text = $("note-text").value.trim();
    if (!text) { notify(t("emptyReply"), "error"); return; }
    act(async () => {
      await api(path("notes"), { method: "POST", body: { text } });
      if ($("note-text").value.trim() === text) $("note-text").value = "";
    },
        t("noteAdded"));
  });
  $("macro").addEventListener("change", async () => {
    const name = $("macro").value;
    if (!name || !state.current) return;
    try {
      const out = await api(`/v1/handoff/tickets/${state.current.id}/macros/${encodeURIComponent(name)}?language=${encodeURIComponent(state.current.language || "en")}`);
      const box = $("reply-text");
      box.value = box.value.trim() ? `${box.value.trim()}\n${out.text}` : out.text;
      state.replyKey = null;
      $("macro-missing").textContent = out.missing.length ? t("macroMissing", { v: out.missing.join(", ") }) : "";
      box.focus();
    } catch (err) { if (err.status !== 401) notify(err.message, "error"); }
    $("macro").value = "";
  });
  $("close-ticket").addEventListener("click", closeTicket);
  const path = (action) => `/v1/handoff/tickets/${state.current.id}/${action}`;
  $("approve").addEventListener("click", () => {
    if (!mayApprove(state.current)) { notify(t("refuseLevel", { need: state.current.approval_level, mine: state.me.approval_level }), "error"); return; }
    state.draftKey = state.draftKey || newKey();
    act(() => api(path("approve"), { method: "POST", key: state.draftKey }), t("approved"));
  });
  $("edit-toggle").addEventListener("click", () => { $("edit-box").hidden = !$("edit-box").hidden; });
  $("edit-send").addEventListener("click", () => {
    if (!mayApprove(state.current)) { notify(t("refuseLevel", { need: state.current.approval_level, mine: state.me.approval_level }), "error"); return; }
    const text = $("edit-text").value.trim();
    if (!text) { notify(t("emptyReply"), "error"); return; }
    state.draftKey = state.draftKey || newKey();
    act(() => api(path("edit-and-send"), { method: "POST", body: { text }, key: state.draftKey }), t("approved"));
  });
  $("reject").addEventListener("click", () => {
    const reason = $("reject-reason").value.trim();
    if (!reason) { notify(t("needReason"), "error"); $("reject-reason").focus(); return; }
    act(() => api(path("reject"), { method: "POST", body: { reason } }), t("rejected"));
  });
  $("ap-approve").addEventListener("click", () => {
    if (!mayApprove(state.current)) { notify(refusal(state.current), "error"); return; }
    state.draftKey = state.draftKey || newKey();
    act(() => api(path("approve"), { method: "POST", key: state.draftKey }), t("apApprovedMsg"));
  });
  $("ap-reject").addEventListener("click", () => {
    if (!mayApprove(state.current)) { notify(refusal(state.current), "error"); return; }
    const reason = $("ap-reason").value.trim() || t("apNoReason");
    act(() => api(path("reject"), { method: "POST", body: { reason } }), t("apRejectedMsg"));
  });
  $("transcript").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-ref]");
    if (!b || !state.current) return;
    const reason = (window.prompt(t("revealReason")) || "").trim();
    if (!reason) return;
    const ref = b.dataset.ref;
    act(async () => {
      const out = await api(path("reveal"), { method: "POST", body: { ref, reason } });
      state.revealed[ref] = out.value;
    }, t("revealed"));
  });
  $("reply-text").addEventListener("input", () => { state.replyKey = null; });
  $("send").addEventListener("click", async () => {
    const text = $("reply-text").value.trim();
    if (!text) { notify(t("emptyReply"), "error"); return; }
    state.replyKey = state.replyKey || newKey();     // a retry of the same text repeats the key: sent once
    const key = state.replyKey;
    await act(async () => {
      await api(path("messages"), { method: "POST", body: { text }, key });
      if (state.replyKey === key) { $("reply-text").value = ""; state.replyKey = null; }
    }, t("sent"));
  });
  $("transfer").addEventListener("click", () => {
    const team = $("transfer-team").value.trim();
    if (!team) { notify(t("needTeam"), "error"); return; }
    act(() => api(path("transfer"), { method: "POST", body: { team } }), t("transferred"));
  });
  $("resolve").addEventListener("click", () =>
    act(() => api(path("resolve"), { method: "POST", body: { outcome: $("outcome").value } }), t("resolved")));
  $("return-bot").addEventListener("click", () =>
    act(() => api(path("return-to-bot"), { method: "POST", body: {} }), t("returned")));
}

// keyboard: "/" search, Alt+N claim next, Alt+C claim this ticket, Ctrl+Enter send, Alt+R resolve, Escape back
function onShortcut(e) {
  if (!state.me) return;
  const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement && document.activeElement.tagName);
  const click = (id) => { const b = $(id); if (b && !b.hidden && !b.disabled) { e.preventDefault(); b.click(); } };
  if (e.key === "/" && !typing) { e.preventDefault(); $("q").focus(); }
  else if (e.altKey && !e.ctrlKey && (e.key === "n" || e.key === "N" || e.code === "KeyN")) click("claim-next");
  else if (e.altKey && !e.ctrlKey && (e.key === "c" || e.key === "C" || e.code === "KeyC") && state.current) click("claim-this");
  else if (e.altKey && !e.ctrlKey && (e.key === "r" || e.key === "R" || e.code === "KeyR") && state.current) click("resolve");
  else if ((e.ctrlKey || e.metaKey) && e.key === "Enter" && document.activeElement === $("reply-text")) click("send");
  else if (e.key === "Escape" && !typing && state.current) closeTicket();
}

async function loadStats() {
  try {
    const s = await api("/v1/handoff/stats");
    $("st-queued").textContent = String(s.queued);
    $("st-claimed").textContent = String(s.claimed);
    $("st-overdue").textContent = String(s.overdue);
    $("st-breaches").textContent = String(s.sla_breaches_24h);
    $("st-oldest").textContent = s.oldest_wait_seconds === null ? t("none") : fmtDuration(s.oldest_wait_seconds);
    const teams = new Map();
    const row = (team) => teams.get(team) || teams.set(team, { queued: 0, claimed: 0, overdue: 0 }).get(team);
    for (const d of s.depth) { const r = row(d.team); r.queued += d.queued; r.claimed += d.claimed; r.overdue += d.overdue; }
    for (const h of s.handling || []) Object.assign(row(h.team), h);
    const fmt = (v) => (v === null || v === undefined ? t("none") : fmtDuration(v));
    $("team-table").tBodies[0].replaceChildren(...[...teams.entries()].sort().map(([team, r]) => el("tr", { "data-team": team },
      el("td", { text: team }), el("td", { text: String(r.queued) }), el("td", { text: String(r.claimed) }),
      el("td", { text: String(r.overdue) }), el("td", { text: String(r.closed_24h || 0) }),
      el("td", { text: fmt(r.handle_seconds_avg) }), el("td", { text: fmt(r.wait_seconds_avg) }))));
  } catch { /* a 401 signs out in api(); the figures refresh on the next round */ }
}

wire();
wireMacroEditor();
applyLanguage();
if (state.token) signIn(state.token);
